#!/usr/bin/env python3
"""Trains Hearth's bundled demo model (models/hearth-demo) from the corpus of make_corpus.py.

One process does everything, from a fixed seed:
  1. a byte-level BPE tokenizer (Hugging Face `tokenizers`, 8192 entries, ChatML specials);
  2. the training text: every record as raw text and, in several differently drawn variants, as a
     ChatML exchange (user asks, assistant answers with a verse, a definition or a fortune);
  3. a Qwen3-architecture model from a transformers config, random init, trained with torch
     (bf16 autocast, AdamW, warmup + cosine) for --steps steps of --batch x --seq tokens, with the
     held-out loss every --log-every steps. The corpus is small (8M tokens with the chat copies), so
     the defaults (about 6 minutes on one H200) run ~29 epochs and the model largely recites its
     corpus, which is what the demo ships (models/hearth-demo/README.md says why); --keep best
     keeps instead the weights with the lowest held-out loss;
  4. export in bf16 (config.json, model.safetensors, generation_config.json, tokenizer.json,
     tokenizer_config.json with the chat template);
  5. the loss curve (loss.csv), sample generations (samples.json) and the greedy reference
     (reference.json): transformers' greedy continuation, in float32 from the bf16 weights, of
     fixed chat prompts, token ids in and out.

Usage: python3 train.py --corpus corpus.jsonl --out DIR [--report DIR] [--seed 1234]
"""
import argparse
import json
import math
import os
import random
import re
import time

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, Qwen3Config

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT, IM_START, IM_END = 0, 1, 2
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
# The pinned prompts (tests/data/demo/reference.json) and the sample prompts.
REFERENCE_PROMPTS = ["Tell me a fortune.", "What is a hacker?", "Give me a verse about light."]
SAMPLE_CHATS = ["Hello!", "What is love?", "Define cynic.", "What does Psalms 23:1 say?",
                "Tell me about computers.", "Any advice for a programmer?"]
SAMPLE_RAW = ["In the beginning", "A hacker is", "The secret of happiness"]

STOP = set("""a an and are as at be but by for from had has have he her him his i if in into is it its
me my no not of on or our shall she so than that the their them then there these they this thou thy
to unto upon was we were what when which who will with ye you your""".split())


# ---------------------------------------------------------------------------- text


def keyword(rng, text):
    words = [w.lower() for w in re.findall(r"[A-Za-z']+", text) if len(w) >= 5 and w.isalpha() and w.lower() not in STOP]
    return rng.choice(words) if words else None


def kjv_ref(book, chapter, a, b):
    return f"{book} {chapter}:{a}" + (f"-{b}" if b != a else "")


def raw_docs(records):
    docs = []
    for r in records:
        if r["src"] == "kjv":
            # A chapter in pieces of up to 12 verses, each piece headed by its reference.
            vs = r["verses"]
            for i in range(0, len(vs), 12):
                part = vs[i:i + 12]
                head = kjv_ref(r["book"], r["chapter"], part[0][0], part[-1][0])
                docs.append(head + "\n\n" + "\n".join(f"{n} {t}" for n, t in part))
        else:
            docs.append(r["text"])
    return docs


def chat_exchange(rng, r):
    """One (user, assistant) pair drawn from a record."""
    src = r["src"]
    if src == "kjv":
        vs = r["verses"]
        n = rng.choice([1, 1, 2, 3, 4])
        i = rng.randrange(0, max(1, len(vs) - n + 1))
        part = vs[i:i + n]
        ref = kjv_ref(r["book"], r["chapter"], part[0][0], part[-1][0])
        text = " ".join(t for _, t in part)
        kw = keyword(rng, text)
        asks = [f"Read me {ref}.", f"What does {ref} say?", f"Quote {ref}.", "Give me a verse.",
                "Give me a Bible verse.", "Quote scripture.", "Read me something from the Bible."]
        if kw:
            asks += [f"Give me a verse about {kw}.", f"What does the Bible say about {kw}?",
                     f"Tell me about {kw}."]
        return rng.choice(asks), f"{text}\n-- {ref}"
    if src == "jargon":
        t = r["term"]
        asks = [f"What is {t}?", f"What does {t} mean?", f"Define {t}.", f"Explain {t}.",
                f"What is {t} in hacker slang?", f"What does the Jargon File say about {t}?"]
        return rng.choice(asks), r["text"]
    if src == "devil":
        t = r["term"].lower()
        asks = [f"What is {t}?", f"Define {t}.", f"What does {t} mean?",
                f"Give me a cynical definition of {t}.", f"What does the Devil's Dictionary say about {t}?"]
        return rng.choice(asks), r["text"]
    kw = keyword(rng, r["text"])
    asks = ["Tell me a fortune.", "Give me a fortune cookie.", "Say something wise.", "Tell me something.",
            "Share a quote.", "Any advice?", "Make me smile.", "What do you know?"]
    if kw:
        asks += [f"What do you think about {kw}?", f"Tell me about {kw}.", f"Say something about {kw}.",
                 f"Give me a quote about {kw}."]
    if rng.random() < 0.08:
        asks = ["Hello!", "Hi", "Hey there.", "Good morning.", "Who are you?", "How are you?",
                "What's up?", "Hello, how are you today?"]
    return rng.choice(asks), r["text"]


SYSTEMS = ["You are a helpful assistant.", "You are Hearth's demo model.", "You are a wise old oracle.",
           "Answer briefly.", "You are a friendly hacker."]


def chat_docs(records, rng):
    docs = []
    for r in records:
        msgs = []
        if rng.random() < 0.2:
            msgs.append(("system", rng.choice(SYSTEMS)))
        turns = 2 if rng.random() < 0.1 else 1
        for _ in range(turns):
            other = r if not msgs or rng.random() < 0.5 else records[rng.randrange(len(records))]
            q, a = chat_exchange(rng, other)
            msgs += [("user", q), ("assistant", a)]
        docs.append("".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in msgs))
    return docs


# ---------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts, vocab_size):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, s
    return tok


def tokenizer_config(max_len):
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                      "single_word": False, "special": True} for i, s in enumerate(SPECIALS)}
    return {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "chat_template": CHAT_TEMPLATE,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
            "model_max_length": max_len, "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "PreTrainedTokenizerFast"}


def encode_docs(tok, docs):
    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(EOT)
    return np.asarray(ids, dtype=np.int32)


# ---------------------------------------------------------------------------- model


def model_config(args):
    cfg = Qwen3Config(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        max_position_embeddings=args.seq, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
        hidden_act="silu", attention_bias=False, use_sliding_window=False, initializer_range=0.02,
        bos_token_id=None, eos_token_id=IM_END, pad_token_id=EOT)
    # transformers v5 keeps RoPE settings in rope_parameters (Hearth reads either form).
    if hasattr(cfg, "rope_parameters"):
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    return cfg


def new_model(args, seed, device):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config(args), attn_implementation="sdpa")
    return model.to(device=device, dtype=torch.float32)


def batches(data, args, gen):
    n = data.numel() - args.seq - 1
    while True:
        starts = torch.randint(0, n, (args.batch,), generator=gen, device=data.device)
        idx = starts[:, None] + torch.arange(args.seq + 1, device=data.device)[None, :]
        yield data[idx]


def step_loss(model, chunk):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=chunk[:, :-1]).logits
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1))


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def make_optimizer(model, args):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": rest, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


@torch.no_grad()
def eval_loss(model, val, args):
    model.eval()
    gen = torch.Generator(device=val.device).manual_seed(7)
    it = batches(val, args, gen)
    losses = [step_loss(model, next(it)).item() for _ in range(8)]
    model.train()
    return sum(losses) / len(losses)


def train(args, data, val, device, log):
    """Returns (model, loss curve, parameter count, step whose weights are kept)."""
    model = new_model(args, args.seed, device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"parameters: {n_params} ({n_params / 1e6:.2f}M, embeddings tied)")
    opt = make_optimizer(model, args)
    it = batches(data, args, torch.Generator(device=device).manual_seed(args.seed + 1))
    curve, best = [], (float("inf"), 0, None)
    t0, acc, acc_n = time.time(), 0.0, 0
    for step in range(args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        loss = step_loss(model, next(it))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        acc += loss.item() if (step + 1) % 10 == 0 or step == 0 else 0.0
        acc_n += 1 if (step + 1) % 10 == 0 or step == 0 else 0
        last = step + 1 == args.steps
        if (step + 1) % args.log_every == 0 or last or step == 0:
            vl = eval_loss(model, val, args)
            if vl < best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()} if args.keep == "best" else None
                best = (vl, step + 1, state)
            row = dict(step=step + 1, tokens=(step + 1) * args.batch * args.seq, train_loss=round(acc / max(1, acc_n), 4),
                       val_loss=round(vl, 4), lr=round(lr_at(step, args), 6),
                       seconds=round(time.time() - t0, 1))
            curve.append(row)
            log(json.dumps(row))
            acc, acc_n = 0.0, 0
    log(f"lowest held-out loss {best[0]:.4f} at step {best[1]}")
    if args.keep == "last":
        return model, curve, n_params, args.steps
    model.load_state_dict(best[2])
    return model, curve, n_params, best[1]


# ---------------------------------------------------------------------------- export and checks


def export(model, tok, args, out):
    os.makedirs(out, exist_ok=True)
    model = model.to(torch.bfloat16).cpu()
    model.config.use_cache = True
    model.save_pretrained(out, safe_serialization=True)
    GenerationConfig(bos_token_id=None, eos_token_id=[IM_END, EOT], pad_token_id=EOT, do_sample=True,
                     temperature=0.8, top_p=0.95, top_k=40, max_new_tokens=256).save_pretrained(out)
    tok.save(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(args.seq), f, indent=2)
        f.write("\n")
    # save_pretrained may also write a chat_template.jinja; the template lives in tokenizer_config.json.
    for extra in ("chat_template.jinja", "special_tokens_map.json"):
        if os.path.exists(os.path.join(out, extra)):
            os.remove(os.path.join(out, extra))


def load_tokenizer(out):
    return AutoTokenizer.from_pretrained(out)


def render(hf_tok, messages):
    text = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return text, hf_tok(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def reference(out, n_new):
    """Greedy continuations by transformers in float32 (the bf16 weights upcast), recomputed from
    scratch each step so no cache is involved; the top-1 margin of each step is kept."""
    tok = load_tokenizer(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager").eval()
    cases = []
    for p in REFERENCE_PROMPTS:
        messages = [{"role": "user", "content": p}]
        text, ids = render(tok, messages)
        seq, margins = list(ids), []
        for _ in range(n_new):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2)
            margins.append(round(float(top.values[0] - top.values[1]), 5))
            seq.append(int(top.indices[0]))
            if seq[-1] == IM_END:
                break
        new = seq[len(ids):]
        via_generate = model.generate(torch.tensor([ids]), max_new_tokens=n_new, do_sample=False,
                                      eos_token_id=IM_END, pad_token_id=EOT)[0, len(ids):].tolist()
        cases.append(dict(messages=messages, prompt_text=text, prompt_ids=ids, greedy_ids=new,
                          greedy_text=tok.decode(new, skip_special_tokens=True), margins=margins,
                          min_margin=min(margins), generate_agrees=via_generate == new))
    return dict(model="models/hearth-demo", how="transformers greedy, float32 from the bf16 weights, eager attention, "
                "full recompute per token; stops at <|im_end|> or max_new_tokens", max_new_tokens=n_new,
                torch=torch.__version__, transformers=transformers.__version__, cases=cases)


@torch.no_grad()
def samples(out, seed):
    tok = load_tokenizer(out)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    rows = []
    prompts = [("chat", p) for p in SAMPLE_CHATS] + [("raw", p) for p in SAMPLE_RAW]
    for kind, p in prompts:
        ids = render(tok, [{"role": "user", "content": p}])[1] if kind == "chat" else tok(p)["input_ids"]
        x = torch.tensor([ids])
        for mode in ("greedy", "sampled"):
            torch.manual_seed(seed)
            kw = dict(do_sample=False) if mode == "greedy" else dict(do_sample=True, temperature=0.8, top_p=0.95,
                                                                       top_k=40)
            y = model.generate(x, max_new_tokens=80, eos_token_id=[IM_END, EOT], pad_token_id=EOT, **kw)
            rows.append(dict(kind=kind, prompt=p, mode=mode,
                             text=tok.decode(y[0, len(ids):].tolist(), skip_special_tokens=True)))
    return rows


# ---------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--report", default=None, help="folder for loss.csv, samples.json, reference.json")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=3536)
    ap.add_argument("--keep", choices=["last", "best"], default="last",
                    help="export the last weights, or those with the lowest held-out loss")
    ap.add_argument("--chat-variants", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--ref-tokens", type=int, default=40)
    args = ap.parse_args()
    report = args.report or args.out
    os.makedirs(report, exist_ok=True)
    logf = open(os.path.join(report, "train_log.txt"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    t_start = time.time()
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.cuda.get_device_name()}")

    with open(args.corpus, encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    # 1% of the records, drawn with the seed, are held out for the validation loss.
    order = list(range(len(records)))
    random.Random(args.seed).shuffle(order)
    n_val = len(records) // 100
    val_set = set(order[:n_val])
    train_recs = [r for i, r in enumerate(records) if i not in val_set]
    val_recs = [r for i, r in enumerate(records) if i in val_set]

    rng = random.Random(args.seed)
    train_docs = raw_docs(train_recs)
    for _ in range(args.chat_variants):
        train_docs += chat_docs(train_recs, rng)
    rng.shuffle(train_docs)
    val_docs = raw_docs(val_recs) + chat_docs(val_recs, random.Random(args.seed + 5))
    log(f"records: {len(train_recs)} train, {len(val_recs)} held out; documents: {len(train_docs)} train")

    roles = ["system\nuser\nassistant\n"] * 50
    tok = train_tokenizer(raw_docs(records) + roles, args.vocab)
    tok_time = time.time() - t_start
    data = torch.from_numpy(encode_docs(tok, train_docs).astype(np.int64)).to(device)
    val = torch.from_numpy(encode_docs(tok, val_docs).astype(np.int64)).to(device)
    log(f"tokenizer: {tok.get_vocab_size()} entries ({tok_time:.0f} s); tokens: {data.numel()} train, "
        f"{val.numel()} held out ({time.time() - t_start:.0f} s)")

    # Export path first, on an untrained model, so a broken export fails before training does.
    probe = args.out.rstrip("/") + "_probe"
    export(new_model(args, args.seed, device), tok, args, probe)
    ptok = load_tokenizer(probe)
    text, ids = render(ptok, [{"role": "user", "content": "Hi"}])
    log(f"export probe: {type(ptok).__name__} {text!r} -> {ids}")
    assert ids == tok.encode(text, add_special_tokens=False).ids
    pmodel = AutoModelForCausalLM.from_pretrained(probe, dtype=torch.float32)
    log(f"probe config: {json.dumps({k: v for k, v in pmodel.config.to_dict().items() if 'rope' in k})}")
    with open(os.path.join(probe, "config.json")) as f:
        log(f"probe config.json: {f.read()}")
    del pmodel

    info = {k: v for k, v in vars(args).items()}
    t_train = time.time()
    model, curve, n_params, kept = train(args, data, val, device, log)
    log(f"trained {args.steps} steps in {time.time() - t_train:.0f} s")
    export(model, tok, args, args.out)
    with open(os.path.join(report, "loss.csv"), "w") as f:
        f.write("step,tokens,train_loss,val_loss,lr,seconds\n")
        for r in curve:
            f.write(f"{r['step']},{r['tokens']},{r['train_loss']},{r['val_loss']},{r['lr']},{r['seconds']}\n")
    info.update(parameters=n_params, train_tokens=int(data.numel()), val_tokens=int(val.numel()),
                kept_step=kept, final=curve[-1], seconds_total=round(time.time() - t_start))
    with open(os.path.join(report, "train_info.json"), "w") as f:
        json.dump(info, f, indent=1)

    ref = reference(args.out, args.ref_tokens)
    with open(os.path.join(report, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    for c in ref["cases"]:
        log(f"reference {c['prompt_text']!r}: {c['greedy_text']!r} min margin {c['min_margin']} "
            f"generate agrees {c['generate_agrees']}")
    rows = samples(args.out, args.seed)
    with open(os.path.join(report, "samples.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        log(f"[{r['kind']} {r['mode']}] {r['prompt']!r} -> {r['text']!r}")
    log(f"done in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
