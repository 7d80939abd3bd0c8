package batching

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Model is an engine's step-time model and capacities (see the package
// documentation for the form and the sources of the constants). Every
// duration is divided by Speedup.
type Model struct {
	// Name says which engine, model and accelerator the constants are from.
	Name string
	// StepFloor is the fixed cost of one step (any step, decode-only or
	// not): the measured inter-token latency of a lone sequence. > 0.
	StepFloor time.Duration
	// PrefillPerToken is the cost of prefilling one prompt token with no
	// context before it, > 0.
	PrefillPerToken time.Duration
	// AttentionTokens is the context length at which attention doubles a
	// prompt token's prefill cost: a token at position i costs
	// PrefillPerToken × (1 + i/AttentionTokens). 0 leaves attention out.
	AttentionTokens float64
	// DecodePerContextToken is the cost, in nanoseconds (a float: it is
	// about 12 ns), of each context token of each decoding sequence in a
	// step: the KV cache read. >= 0.
	DecodePerContextToken float64
	// MaxBatchedTokens is the step's token budget: one per decoding
	// sequence, the rest for prefill chunks. >= 1.
	MaxBatchedTokens int
	// MaxSeqs is the most sequences running at once, >= 1.
	MaxSeqs int
	// KVBlocks is the size of the KV block pool (running sequences and the
	// prefix cache together), in blocks of BlockSize tokens, >= 1.
	KVBlocks int
	// BlockSize is the KV block size in tokens, >= 1.
	BlockSize int
	// Speedup divides every duration (the trace's time compression), > 0;
	// 0 means 1.
	Speedup float64
}

// Llama70BH100 is Llama-3.3-70B-Instruct in FP8 with tensor parallelism 2
// on two H100 80GB GPUs, served by NVIDIA NIM for LLMs 1.8.0 (its FP8 TP2
// profile, a TensorRT-LLM engine), fitted to NVIDIA's published NIM
// benchmark (the package documentation gives the fit and its residuals),
// with KV blocks of 64 tokens. Speedup is 1: set it to the trace's time
// compression.
var Llama70BH100 = Model{
	Name:                  "Llama-3.3-70B-Instruct FP8, TP2 on 2x H100 80GB, NVIDIA NIM 1.8.0 (TensorRT-LLM)",
	StepFloor:             18580 * time.Microsecond,
	PrefillPerToken:       74197 * time.Nanosecond,
	AttentionTokens:       53864,
	DecodePerContextToken: 12.34,
	MaxBatchedTokens:      8192,
	MaxSeqs:               256,
	KVBlocks:              470000 / 64,
	BlockSize:             64,
	Speedup:               1,
}

// Validate reports every problem of m at once.
func (m Model) Validate() error {
	var errs []error
	if m.StepFloor <= 0 || m.PrefillPerToken <= 0 {
		errs = append(errs, fmt.Errorf("step floor %v, prefill per token %v: want > 0", m.StepFloor, m.PrefillPerToken))
	}
	if !(m.AttentionTokens >= 0) || math.IsInf(m.AttentionTokens, 0) {
		errs = append(errs, fmt.Errorf("attention tokens %v: want finite, >= 0", m.AttentionTokens))
	}
	if !(m.DecodePerContextToken >= 0) || math.IsInf(m.DecodePerContextToken, 0) {
		errs = append(errs, fmt.Errorf("decode per context token %v: want finite, >= 0", m.DecodePerContextToken))
	}
	if m.MaxBatchedTokens < 1 || m.MaxSeqs < 1 || m.KVBlocks < 1 || m.BlockSize < 1 {
		errs = append(errs, fmt.Errorf("max batched tokens %d, max seqs %d, kv blocks %d, block size %d: want >= 1",
			m.MaxBatchedTokens, m.MaxSeqs, m.KVBlocks, m.BlockSize))
	}
	if !(m.Speedup >= 0) || math.IsInf(m.Speedup, 0) {
		errs = append(errs, fmt.Errorf("speedup %v: want finite, > 0", m.Speedup))
	}
	if len(errs) > 0 {
		return fmt.Errorf("batching: invalid model: %w", errors.Join(errs...))
	}
	return nil
}

// Scaled returns m with every duration divided by speedup (Speedup set to
// it).
func (m Model) Scaled(speedup float64) Model {
	m.Speedup = speedup
	return m
}

func (m Model) speedup() float64 {
	if m.Speedup == 0 {
		return 1
	}
	return m.Speedup
}

// PrefillWork returns the prefill cost of the prompt tokens [from, from+n)
// in units of PrefillPerToken: n plus their attention over the tokens before
// them, sum over i of i/AttentionTokens.
func (m Model) PrefillWork(from, n int) float64 {
	w := float64(n)
	if m.AttentionTokens > 0 && n > 0 {
		// sum_{i=from}^{from+n-1} i = n*from + n(n-1)/2
		w += (float64(n)*float64(from) + float64(n)*float64(n-1)/2) / m.AttentionTokens
	}
	return w
}

// StepTime returns the duration of one step that prefills prefillWork
// (PrefillWork units) and decodes sequences holding contextTokens tokens of
// context in all (their prompts and outputs so far): StepFloor +
// PrefillPerToken × prefillWork + DecodePerContextToken × contextTokens,
// divided by Speedup. Cost: O(1).
func (m Model) StepTime(prefillWork float64, contextTokens int) time.Duration {
	ns := float64(m.StepFloor) + float64(m.PrefillPerToken)*prefillWork + m.DecodePerContextToken*float64(contextTokens)
	return time.Duration(ns/m.speedup() + 0.5)
}
