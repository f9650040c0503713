#!/usr/bin/env python3
"""PyTorch + transformers beside `hearth bench` on the same model directory and GPU.

Greedy generation from random prompt ids with a static KV cache (transformers' fastest
generate path; --compile adds torch.compile of the forward). Prefill tok/s = prompt /
time to the first token; decode tok/s = (gen - 1) / time from the first to the last token;
the median over --reps runs after one warm-up, as hearth bench and bench/peer/compare.mjs.

  python3 bench/peer/torch_generate.py MODEL_DIR [--prompt-tokens 512] [--gen-tokens 128]
          [--reps 3] [--dtype bfloat16] [--compile]
"""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList


class FirstToken(StoppingCriteria):
    """Records when the first generated token exists (the end of prefill)."""

    def __init__(self):
        self.first = None

    def __call__(self, input_ids, scores, **kwargs):
        if self.first is None:
            torch.cuda.synchronize()
            self.first = time.perf_counter()
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype)).cuda().eval()
    if a.compile:
        compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

        def forward(*args, **kwargs):
            # Each call is a new step for the CUDA graphs: the static cache is written in place.
            torch.compiler.cudagraph_mark_step_begin()
            return compiled(*args, **kwargs)

        model.forward = forward
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, a.prompt_tokens), generator=g).cuda()

    def run(gen):
        first = FirstToken()
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=gen, min_new_tokens=gen, do_sample=False,
                             cache_implementation="static", stopping_criteria=StoppingCriteriaList([first]),
                             pad_token_id=0)
        torch.cuda.synchronize()
        end = time.perf_counter()
        assert out.shape[1] == a.prompt_tokens + gen
        return a.prompt_tokens / (first.first - start), (gen - 1) / (end - first.first)

    with torch.inference_mode():
        run(min(a.gen_tokens, 8))
        runs = [run(a.gen_tokens) for _ in range(a.reps)]
    pp = statistics.median(r[0] for r in runs)
    tg = statistics.median(r[1] for r in runs)
    print(f"torch {torch.__version__} transformers, {torch.cuda.get_device_name()}, static cache"
          f"{' + torch.compile' if a.compile else ''}: pp{a.prompt_tokens} {pp:.1f} tok/s, tg{a.gen_tokens} {tg:.2f} tok/s")


if __name__ == "__main__":
    main()
