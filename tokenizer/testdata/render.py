"""Renders each chat of cases.json with the chat template of
tokenizer_config.json the way Hugging Face transformers' apply_chat_template
does (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
lstrip_blocks, add_generation_prompt=True; vLLM and SGLang render chat
prompts through it), and writes rendered.json for encode.js.
Run: python3 render.py (needs jinja2)."""
import json
from jinja2.sandbox import ImmutableSandboxedEnvironment

cfg = json.load(open("tokenizer_config.json"))
cases = json.load(open("cases.json"))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
tmpl = env.from_string(cfg["chat_template"])
out = {"chats": [], "prompts": cases["prompts"]}
for c in cases["chats"]:
    text = tmpl.render(messages=c["messages"], add_generation_prompt=True,
                       bos_token=cfg.get("bos_token") or "", eos_token=cfg.get("eos_token") or "")
    out["chats"].append(dict(c, text=text))
json.dump(out, open("rendered.json", "w"), ensure_ascii=False, indent=1)
