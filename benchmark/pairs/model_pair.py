"""Make a Llama target + EAGLE-3 draft pair whose greedy agreement is set by one number.

    python benchmark/model_pair.py DIR --shape {8b,1b,tiny} --accept-length A[,A2,...] --seed N [--device cuda|cpu]

writes DIR/target (LlamaForCausalLM), DIR/draft (LlamaForCausalLMEagle3) and DIR/design.json. SGLang
loads them unchanged (--model-path DIR/target --speculative-draft-model-path DIR/draft
--speculative-algorithm EAGLE3); with 3 steps, topk 1 and 4 draft tokens its measured accept length
is A. Random weights give accept length 1.0 and hide every benefit of speculation.

How (file:line refer to the installed sglang 0.5.17 under sglang/srt/):
- Language. A walk set S of hidden_size tokens (no special token, so EOS is never produced), token
  S[c] owning hidden coordinate c. Every other token shares the coordinate of a random member of S.
  A seeded single cycle `nxt` over the coordinates is the language: after a token on coordinate c
  comes S[nxt[c]].
- Target. Embedding row t is EMBED * e_coord(t); every o_proj and down_proj is 0, so the residual
  stream never changes (models/llama.py:341-363) and each EAGLE-3 aux state, hidden + residual at
  the input of layers [2, L//2, L-3] (models/llama.py:435-437, 885-892), is that same one-hot row.
  q/k/v/gate/up are random, so every GEMM and attention kernel still does its full work. lm_head
  row S[nxt[c]] is e_c: the right token's logit is ~sqrt(hidden_size), every other logit is exactly
  0, so greedy output never rests on a bf16 near-tie.
- Draft, one layer. fc copies the first aux chunk scaled to HID = sqrt(d) (models/llama_eagle3.py:
  229-238); o_proj = 0 so attention and the token embeddings add nothing
  (models/llama_eagle3.py:89-106). The MLP reads RMSNorm(h), always ~sqrt(d) on the one hot
  coordinate c whatever |h| is; unit c fires through gate and up on coordinate c only, and down
  column c is HID * (e_nxt[c] - e_c) / act, so h + mlp(h) = HID * e_nxt[c]: every draft step moves
  the hidden one token along the walk. The next step is fed that pre-norm sum
  (models/llama_eagle3.py:254-260; speculative/eagle_worker_v2.py:692), and since HID = sqrt(d) it
  equals the normed one too. lm_head row S[nxt[c]] reads e_c for "good" coordinates and row
  S[nxt[nxt[c]]] (always wrong) for the others.
- KV probe (--kv-probe-offset D, off by default). The models above ignore their KV caches (o_proj
  = 0), so their outputs cannot tell a server whose attention reads the right entries from one that
  does not. With D > 0 two attention heads of the draft and of the target's last layer read the
  entries D tokens back and at the current token, and cancel exactly when the first holds what the
  walk put there; a stale entry, or a context read one entry short, adds noise that swamps the
  hidden state (add_kv_probe). The draft's probe shows whether a server keeps the draft KV
  current; the target's, whether each forward's attention reads the request's whole context (its
  lengths) and nothing stale in it. The target's aux states, read before its last layer, do not
  change. Prompts must follow the walk.
- Accept length. After a verify the draft hidden sits on the latest token's coordinate c; step k
  proposes the right token iff the k-th coordinate of the walk from c is good. A good set of
  density q gives 1 + q + q^2 + q^3 in expectation; the set actually drawn (nested in q for one
  seed) is tuned so that its exact mean over all starting coordinates is A.

Only the structure (walk, coordinates, good set) decides behaviour; it is drawn on the CPU from the
seed, so it is identical on every device. The random q/k/v/gate/up filler is drawn on --device and
differs between cpu and cuda, which changes no output.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import time
from functools import lru_cache
from typing import Iterator

import torch
from safetensors.torch import save_file

from benchmark.pairs.design import MAX_POSITIONS, NUM_STEPS, SHAPES, VOCAB, Design, head_dim, make_design
from benchmark.pairs.weights import LAYERS_PER_SHARD, RMS_EPS, ROPE_THETA, draft_tensors, target_shards

FORMAT_VERSION = 1  # bump when the construction changes: a stale DIR/target is then rebuilt


def model_configs(shape: str) -> tuple[dict, dict]:
    dims = SHAPES[shape]
    base = dict(vocab_size=VOCAB, max_position_embeddings=MAX_POSITIONS, rms_norm_eps=RMS_EPS,
                rope_theta=ROPE_THETA, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                tie_word_embeddings=False, dtype="bfloat16", model_type="llama",
                head_dim=head_dim(dims), **dims)
    target = {**base, "architectures": ["LlamaForCausalLM"]}
    # draft_vocab_size keeps the draft's own lm_head (else it borrows the target's:
    # models/llama_eagle3.py:295-297); no d2t, so draft ids are target ids.
    draft = {**base, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1,
             "draft_vocab_size": VOCAB, "target_hidden_size": dims["hidden_size"]}
    return target, draft


@lru_cache(maxsize=1)
def tokenizer_json() -> str:
    """A 32k byte-level BPE like the GPU kit's make_models.py, trained on torch's own sources:
    torch 2.11.0 is pinned on every machine, so the tokenizer is the same everywhere (~2 s)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = os.path.dirname(torch.__file__)
    files = sorted(f for sub in ("_dynamo", "_inductor", "nn")
                   for f in glob.glob(f"{root}/{sub}/**/*.py", recursive=True))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator((open(f, encoding="utf-8").read() for f in files), trainer)
    if tok.get_vocab_size() != VOCAB:  # the walk may use any id below VOCAB
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, expected {VOCAB}")
    return tok.to_str()


def write_tokenizer(out: str) -> None:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(tokenizer_json()),
                                   unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                          "{% endfor %}assistant:")
    fast.save_pretrained(out)


def write_model(out: str, shards: Iterator[dict[str, torch.Tensor]], num_shards: int,
                config: dict) -> None:
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(f"{out}/*.safetensors*"):
        os.remove(old)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        name = (f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors" if num_shards > 1
                else "model.safetensors")
        shard = {k: v.contiguous().cpu() for k, v in shard.items()}
        save_file(shard, f"{out}/{name}", metadata={"format": "pt"})
        weight_map |= dict.fromkeys(shard, name)
        total += sum(v.numel() * v.element_size() for v in shard.values())
    if num_shards > 1:
        with open(f"{out}/model.safetensors.index.json", "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(f"{out}/config.json", "w") as f:
        json.dump(config, f, indent=1)
    with open(f"{out}/generation_config.json", "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    write_tokenizer(out)


def write_pair(root: str, design: Design, device: str) -> dict:
    target_cfg, draft_cfg = model_configs(design.shape)
    # The target depends on shape, seed, KV probe and domains only: a sweep over accept lengths rewrites
    # the draft.
    target_cfg["model_pair"] = {"shape": design.shape, "seed": design.seed,
                                "kv_probe_offset": design.kv_probe_offset,
                                "domains": len(design.domain_accept_lengths), "format": FORMAT_VERSION}
    tdir, ddir = f"{root}/target", f"{root}/draft"
    t0 = time.perf_counter()
    try:
        with open(f"{tdir}/config.json") as f:
            reuse = json.load(f).get("model_pair") == target_cfg["model_pair"]
    except (OSError, ValueError):
        reuse = False
    if reuse:
        print(f"target: kept {tdir} (same shape, seed and KV probe)")
    else:
        num_shards = math.ceil(design.dims["num_hidden_layers"] / LAYERS_PER_SHARD)
        write_model(tdir, target_shards(design, device), num_shards, target_cfg)
        print(f"target: wrote {tdir} in {time.perf_counter() - t0:.1f} s")
    t1 = time.perf_counter()
    write_model(ddir, iter([draft_tensors(design, device)]), 1, draft_cfg)
    print(f"draft: wrote {ddir} in {time.perf_counter() - t1:.1f} s")
    summary = design.summary()
    with open(f"{tdir}/tokenizer.json", "rb") as f:
        summary["tokenizer_sha256"] = hashlib.sha256(f.read()).hexdigest()
    with open(f"{root}/design.json", "w") as f:
        json.dump(summary, f, indent=1)
    return summary


def accept_lengths(text: str) -> tuple[float, ...]:
    """argparse type: one accept length, or one per domain separated by commas."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"accept lengths separated by commas, such as 3.2,1.3; got {text!r}") from None


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="writes DIR/target, DIR/draft and DIR/design.json")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    ap.add_argument("--accept-length", type=accept_lengths, required=True,
                    help=f"designed SGLang accept length for {NUM_STEPS} steps, topk 1, "
                         f"in [1, {NUM_STEPS + 1}]; several, comma-separated (3.2,1.3): the walk "
                         "cut into that many domains, each with its own (design.json lists each "
                         "domain's tokens: a prompt ending in one stays in its domain)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kv-probe-offset", type=int, default=0, metavar="D",
                    help="make the draft's proposals and the target's output need their own KV "
                         "cache entries D tokens back and at the current token (noise when one is "
                         "stale or not read), to check that a server keeps the draft KV current "
                         "and that attention reads each request's whole context; prompts must "
                         "then follow the walk (design.json); 0: off")
    ap.add_argument("--device", choices=["cuda", "cpu"],
                    default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where the tensors are built (default: cuda if available)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:  # the flags' ranges, checked where the design is made: an error line, no traceback
        design = make_design(args.shape, args.accept_length, args.seed, args.kv_probe_offset)
    except ValueError as e:
        ap.error(str(e))
    s = write_pair(args.dir, design, args.device)
    domains = "".join(f"; domain {d}: {x['mean_accept_length']:.3f} (asked {x['accept_length']})"
                      for d, x in enumerate(s["domains"]))
    print(f"design: accept length {s['mean_accept_length']:.3f} over all starts{domains} "
          f"(asked {','.join(map(str, args.accept_length))}, q={s['q']:.3f}, good {s['good_fraction']:.3f}), "
          f"simulated serving {s['simulated_serving_accept_length']:.3f}; "
          f"walk of {s['walk_size']} tokens; {time.perf_counter() - t0:.1f} s in all")
    return s


if __name__ == "__main__":
    main()
