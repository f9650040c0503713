#!/usr/bin/env python3
"""PyTorch + transformers beside `hearth bench` on the same model directory and GPU.

Greedy generation from random prompt ids through transformers' fastest batch-1 path: a static
KV cache, with which generate() itself compiles the decode step (torch.compile,
mode="reduce-overhead": CUDA graphs; the prefill stays eager). --eager turns that compile off.
Prefill tok/s = prompt / time to the first token; decode tok/s = (gen - 1) / time from the
first to the last token; the median over --reps runs after one warm-up of the same lengths,
as hearth bench and bench/peer/compare.mjs.

  python3 bench/peer/torch_generate.py MODEL_DIR [--prompt-tokens 512] [--gen-tokens 128]
          [--reps 3] [--dtype bfloat16] [--eager]
"""
import argparse
import statistics
import time

import torch
import transformers
from transformers import AutoModelForCausalLM, StoppingCriteria, StoppingCriteriaList
from transformers.generation import CompileConfig


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
    p.add_argument("--eager", action="store_true", help="no torch.compile of the decode step")
    a = p.parse_args()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=getattr(torch, a.dtype)).cuda().eval()
    # generate() compiles model.__call__ for the decode steps when the cache is static (on CUDA);
    # wrapping model.forward in torch.compile as well would compile inside that compile. The
    # config is spelled out so that the path does not move with transformers' defaults, and
    # fullgraph makes a graph break an error instead of a silent split.
    model.generation_config.compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead")
    model.generation_config.disable_compile = a.eager
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, a.prompt_tokens), generator=g).cuda()

    def run():
        first = FirstToken()
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=a.gen_tokens, min_new_tokens=a.gen_tokens, do_sample=False,
                             cache_implementation="static", stopping_criteria=StoppingCriteriaList([first]),
                             pad_token_id=0)
        torch.cuda.synchronize()
        end = time.perf_counter()
        assert out.shape[1] == a.prompt_tokens + a.gen_tokens
        return a.prompt_tokens / (first.first - start), (a.gen_tokens - 1) / (end - first.first)

    # The warm-up has the timed runs' lengths: the static cache is sized prompt + gen, and a
    # cache of another size is a new shape, so the first timed run would compile again.
    run()
    runs = [run() for _ in range(a.reps)]
    compiled = getattr(model, "_compiled_call", None) is not None
    pp = statistics.median(r[0] for r in runs)
    tg = statistics.median(r[1] for r in runs)
    print(f"torch {torch.__version__} transformers {transformers.__version__}, {torch.cuda.get_device_name()}, "
          f"static cache{' + torch.compile of decode (CUDA graphs)' if compiled else ', eager'}: "
          f"pp{a.prompt_tokens} {pp:.1f} tok/s, tg{a.gen_tokens} {tg:.2f} tok/s")


if __name__ == "__main__":
    main()
