// The README's example: the official openai client, unchanged; it reads the
// gateway's address from OPENAI_BASE_URL, as it always does.
import OpenAI from 'openai';

const client = new OpenAI({ apiKey: 'sk-globex-demo' });
const stream = await client.chat.completions.create({
  model: 'mock-llama', max_tokens: 8, stream: true,
  messages: [{ role: 'user', content: 'Hello' }],
});
for await (const chunk of stream) process.stdout.write(chunk.choices[0]?.delta?.content ?? '');
process.stdout.write('\n');
