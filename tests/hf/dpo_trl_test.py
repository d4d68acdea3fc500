"""DPO (strata.objective "dpo", Note [DPO]) against TRL's DPOTrainer with precomputed reference
log-probabilities, the pinned trl and transformers, on the same pairs.

A tiny LLaMA written by transformers, a byte-level BPE tokenizer (tests/data/chat_tokenizer.py),
and 8 training pairs (plus 2 held out) as prompt/chosen/rejected strings, prepared by
scripts/prepare_data.py: its tokens and masks must be exactly the rows TRL builds (its
prompt_ids + chosen_ids / rejected_ids, the completion trained). Strata trains 20 steps, fp32,
2 ranks, ZeRO-3 with the parameters and the optimizer states on NVMe, 2 micro-batches of 2
pairs per rank, AdamW at a constant 1e-3, clipping at 1.0; strata.data.epochs makes each step
one pass over the 8 pairs, so each step's batch is TRL's (its one batch of all 8 pairs). Per
step the loss and TRL's rewards (chosen, rejected, margins) must agree within 1e-5 relative
(1e-6 absolute near 0: the first step's rewards are 0 up to rounding), and the final weights
within 1e-4 relative (2-norm per tensor: Adam's normalised step turns rounding-level
differences in near-zero gradient entries into steps of the learning rate's size).

  full: every weight trained; also, a run resumed from its step-10 checkpoint gives steps 10-19
        bit for bit, reading the reference log-probabilities its checkpoint keeps (also once the
        file beside the data is gone; refusing to resume, naming the file, without either); and
        the same 2 ranks split each layer (tensor parallel 2) or each row (sequence parallel 2)
        train as the data-parallel run;
  lora: rank-4 adapters on q_proj and v_proj, TRL given Strata's initial adapters as a PEFT
        model (the reference is then the base with its adapters off, which is the initial model:
        B starts at zero).

Usage: dpo_trl_test.py STRATA_BINARY full|lora. Exits 77 where trl, peft or transformers cannot
be imported, unless STRATA_REQUIRE_PEERS=1 (CI), where that fails.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "tests", "data"))
from peer_env import ensure_library_path, missing_peers  # noqa: E402  (scripts/peer_env.py)

ensure_library_path()
try:
    import numpy as np
    import torch
    import transformers
    from datasets import Dataset
    from peft import PeftModel
    from safetensors.torch import load_file
    from trl import DPOConfig, DPOTrainer
    from chat_tokenizer import make_chat_tokenizer
except Exception as e:  # noqa: BLE001 - any import failure means: not here
    missing_peers(f"trl, peft, datasets or transformers not importable: {e}")

STEPS, LR, BETA = 20, 1e-3, 0.1
TOLERANCE, FLOOR, WEIGHTS_TOLERANCE = 1e-5, 1e-6, 1e-4
PROMPTS = ["What is two plus three?", "Why is the sky blue?", "Tell me a story.", "Translate to French: good morning.",
           "Hello! How are you?", "Summarise: the cat sat on the mat.", "What is a cat?", "Say hello.",
           "Name a colour.", "Count to three."]
CHOSEN = ["Two plus three is five.", "Because sunlight scatters off the air.", "Once upon a time there was a cat.",
          "Bonjour.", "I am fine, thanks.", "A cat rested.", "A cat is a small animal.", "Hello!", "Blue.",
          "One, two, three."]
REJECTED = ["Six.", "It is green.", "No.", "Good night.", "Go away.", "The dog ran.", "A fish.", "Bye.", "Seven.",
            "Three, two."]
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/margins")


def make_model(folder):
    tok = make_chat_tokenizer(folder)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, tie_word_embeddings=False, eos_token_id=tok.eos_token_id,
                                   bos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():  # norms start at 1: perturb them so that they are tested too
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    return tok


def write_pairs(path, first, last):
    with open(path, "w") as f:
        for p, c, r in list(zip(PROMPTS, CHOSEN, REJECTED))[first:last]:
            f.write(json.dumps({"prompt": p + " ", "chosen": c, "rejected": r}) + "\n")
    return [json.loads(line) for line in open(path)]


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def prepared_rows(path):
    """The examples of a token file prepare_data.py wrote: (ids, mask) each."""
    tokens = np.fromfile(path, dtype=np.uint16)
    mask = np.fromfile(path + ".mask", dtype=np.uint8)[32:]
    starts = list(np.fromfile(path + ".examples", dtype=np.uint64)[4:].astype(np.int64)) + [len(tokens)]
    return [(tokens[a:b].tolist(), mask[a:b].tolist()) for a, b in zip(starts, starts[1:])]


def check_tokens(trainer, path):
    """prepare_data.py's pairs are the rows TRL trains on: chosen then rejected, completions trained."""
    rows = prepared_rows(path)
    ds = trainer.train_dataset
    for k in range(len(ds)):
        p = ds[k]["prompt_ids"]
        for j, part in enumerate(("chosen_ids", "rejected_ids")):
            ids, mask = rows[2 * k + j]
            want = p + ds[k][part]
            if ids != want or mask != [0] * len(p) + [1] * len(ds[k][part]):
                sys.exit(f"pair {k} {part}: prepare_data.py wrote {ids} (mask {mask}), TRL trains on {want}")


def strata_config(folder, lora):
    cfg = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "gradient_clipping": 1.0,
           "bf16": {"enabled": False},
           "optimizer": {"type": "AdamW", "params": {"lr": LR, "weight_decay": 0.0, "betas": [0.9, 0.999],
                                                     "eps": 1e-8}},
           "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": folder + "/swap"},
                                 "offload_optimizer": {"device": "nvme", "nvme_path": folder + "/swap"}},
           "strata": {"steps": STEPS, "eval_interval": 0, "save_interval": 10, "model": {"seq_len": 32},
                      "objective": {"type": "dpo", "beta": BETA},
                      "data": {"path": folder + "/train.u16", "eval_path": folder + "/eval.u16", "packing": "none",
                               "long_examples": "truncate", "epochs": 1000}}}
    if lora:
        cfg["strata"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    path = folder + "/dpo.json"
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def strata_metrics(path):
    out = []
    for line in open(path):
        j = json.loads(line)
        if "rewards/chosen" in j:
            out.append({"loss": j["loss"], **{k: j[k] for k in METRICS}})
    return out


class Recording(DPOTrainer):
    """Records each step's loss and rewards as TRL computes them (one micro-batch a step)."""
    steps = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        m = self._metrics["train"]
        self.steps.append({"loss": loss.item(), **{k: m[k][-1] for k in METRICS}})
        return loss


def trl_trainer(folder, pairs, adapter):
    tok = transformers.AutoTokenizer.from_pretrained(folder + "/model")
    model = transformers.AutoModelForCausalLM.from_pretrained(folder + "/model", dtype=torch.float32)
    if adapter:
        model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
    args = DPOConfig(output_dir=folder + "/trl", per_device_train_batch_size=len(pairs), gradient_accumulation_steps=1,
                     learning_rate=LR, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                     max_grad_norm=1.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_steps=STEPS,
                     beta=BETA, loss_type=["sigmoid"], precompute_ref_log_probs=True, logging_steps=1,
                     report_to=[], save_strategy="no", use_cpu=True, bf16=False, fp16=False, seed=0,
                     max_length=None, disable_tqdm=True)
    return Recording(model=model, args=args, train_dataset=Dataset.from_list(pairs), processing_class=tok)


def close(a, b):
    return abs(a - b) <= TOLERANCE * max(abs(a), abs(b)) + FLOOR


def compare_steps(ours, theirs):
    if len(ours) != STEPS or len(theirs) != STEPS:
        sys.exit(f"steps: Strata logged {len(ours)}, TRL {len(theirs)}, expected {STEPS}")
    relative = {k: 0.0 for k in ("loss", *METRICS)}
    absolute = dict(relative)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        for k in relative:
            absolute[k] = max(absolute[k], abs(a[k] - b[k]))
            relative[k] = max(relative[k], abs(a[k] - b[k]) / max(abs(a[k]), abs(b[k]), 1e-30))
            if not close(a[k], b[k]):
                sys.exit(f"step {i} {k}: Strata {a[k]!r}, TRL {b[k]!r}")
    print("per step, largest difference (relative, absolute): " +
          ", ".join(f"{k} {relative[k]:.1e} {absolute[k]:.1e}" for k in relative) +
          f"; last step: loss {ours[-1]['loss']:.6f}, margin {ours[-1]['rewards/margins']:.6f}")


def compare_weights(strata_folder, model, lora):
    """Strata's exported weights (or adapters) against TRL's model after the same steps."""
    ours = {}
    for name in sorted(os.listdir(strata_folder)):
        if name.endswith(".safetensors"):
            ours.update(load_file(os.path.join(strata_folder, name)))
    theirs = {}
    for name, p in model.named_parameters():
        if lora and ("lora_" not in name or ".default." not in name):  # (TRL's "ref" copy: the initial adapters)
            continue
        key = name.replace("base_model.model.", "").replace(".default", "") if lora else name
        theirs[key] = p.detach()
    worst = 0.0
    for key, t in theirs.items():
        mine = next((v for k, v in ours.items() if k.endswith(key) or key.endswith(k)), None)
        if mine is None:
            sys.exit(f"{key}: not in Strata's export ({sorted(ours)[:4]} ...)")
        rel = float((mine.float() - t.float()).norm() / max(float(t.norm()), 1e-30))
        worst = max(worst, rel)
        if rel > WEIGHTS_TOLERANCE:
            sys.exit(f"{key}: Strata's weights differ from TRL's by {rel:.2e} (relative 2-norm)")
    print(f"final weights: {len(theirs)} tensors, largest relative difference {worst:.2e}")


def check_resume(binary, folder, config, first):
    """Resumed at step 10: the reference read back (the checkpoint's copy), the same steps bitwise;
    without the file beside the data it still resumes from the copy; without both it is refused."""
    model = ["--init-from", folder + "/model"]  # (the model's shape: its weights come from the checkpoint)
    step10 = folder + "/ckpt/step_00000010"

    def resume(metrics):
        return subprocess.run([binary, "train", "--config", config, *model, "--nproc", "2", "--resume", step10,
                               "--metrics", metrics, "--save", folder + "/ckpt_resumed", "--overwrite"],
                              capture_output=True, text=True)

    r = resume(folder + "/resumed.jsonl")
    if r.returncode != 0 or f"DPO reference log-probabilities of 20 rows read from {step10}/dpo_reference" not in r.stdout:
        sys.exit(f"the resumed run did not read the checkpoint's reference:\n{r.stdout}\n{r.stderr}")
    if strata_metrics(folder + "/resumed.jsonl") != first[10:]:
        sys.exit("resumed steps 10-19 differ from the first run's")
    refs = [f for f in os.listdir(folder) if f.startswith("train.u16.ref-")]
    if len(refs) != 1:
        sys.exit(f"expected one reference file beside the data, found {refs}")
    os.remove(os.path.join(folder, refs[0]))
    r = resume(folder + "/resumed2.jsonl")
    if r.returncode != 0 or strata_metrics(folder + "/resumed2.jsonl") != first[10:]:
        sys.exit(f"without the file beside the data, the resume from the checkpoint's copy failed:\n{r.stdout}\n{r.stderr}")
    os.remove(step10 + "/dpo_reference")
    r = resume(folder + "/resumed3.jsonl")
    if r.returncode == 0 or "a resumed DPO run compares with the initial model's log-probabilities" not in r.stderr + r.stdout:
        sys.exit(f"a resume without either copy of the reference: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
    print("resumed at step 10: steps 10-19 bit for bit (from the checkpoint's copy of the reference, with and "
          "without the file beside the data); without either the resume is refused by name")


def check_split(binary, folder, config, first, key, name):
    """A split of the same 2 ranks, one data rank of 8 rows, trains as the two data ranks of 4:
    every step's loss within 1e-5 relative and its rewards within 1e-5 absolute (both come from
    differences of row log-probabilities near -50, sums the split computes in fp32 in another
    order: 1e-7 of theirs is 1e-6 of a loss near 0.1). The reference pass runs split too (the
    file an earlier run left beside the data is removed first).
      tensor_parallel.autotp_size 2 (Note [Tensor parallel]): each layer split over both ranks,
        the reference pass read by data rank;
      sequence_parallel_size 2 (Note [Ulysses]): each row's positions split over both ranks,
        its log-probability the sum of both halves'."""
    for f in os.listdir(folder):
        if f.startswith("train.u16.ref-"):
            os.remove(os.path.join(folder, f))
    r = subprocess.run([binary, "train", "--config", config, "--init-from", folder + "/model", "--nproc", "2",
                        "--set", f"{key}=2", "--set", "train_micro_batch_size_per_gpu=8",
                        "--metrics", f"{folder}/{name}.jsonl"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the {name}-parallel DPO run failed:\n{r.stdout}\n{r.stderr}")
    if "DPO reference log-probabilities: one forward pass" not in r.stdout:
        sys.exit(f"the {name}-parallel run did not compute its reference:\n{r.stdout}")
    split = strata_metrics(f"{folder}/{name}.jsonl")
    if len(split) != len(first):
        sys.exit(f"{name} parallel: {len(split)} steps, the data-parallel run {len(first)}")
    worst = {k: 0.0 for k in first[0]}
    for i, (a, b) in enumerate(zip(split, first)):
        for k in b:
            diff = abs(a[k] - b[k]) / (abs(b[k]) if k == "loss" else 1.0)
            worst[k] = max(worst[k], diff)
            if diff > 1e-5:
                sys.exit(f"{name} parallel, step {i}: {k} {a[k]!r}, data parallel {b[k]!r}")
    print(f"{name} parallel 2: {len(split)} steps; largest difference from the data-parallel run: "
          + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()) + " (loss relative, the rest absolute)")


def main():
    binary, mode = sys.argv[1], sys.argv[2]
    lora = mode == "lora"
    with tempfile.TemporaryDirectory(prefix="strata-test-dpo-") as folder:
        make_model(folder + "/model")
        pairs = write_pairs(folder + "/train.jsonl", 0, 8)
        write_pairs(folder + "/eval.jsonl", 8, 10)
        for name in ("train", "eval"):
            run([sys.executable, os.path.join(ROOT, "scripts", "prepare_data.py"), "--tokenizer", folder + "/model",
                 "--out", f"{folder}/{name}", f"{folder}/{name}.jsonl"])
        config = strata_config(folder, lora)
        adapter = None
        if lora:  # Strata's initial adapters, for PEFT
            run([binary, "train", "--config", config, "--init-from", folder + "/model", "--nproc", "2", "--steps",
                 "0", "--save", folder + "/ckpt0"])
            adapter = folder + "/adapter0"
            run([binary, "export", folder + "/ckpt0", "--out", adapter])
        run([binary, "train", "--config", config, "--init-from", folder + "/model", "--nproc", "2", "--metrics",
             folder + "/metrics.jsonl", "--save", folder + "/ckpt"])
        run([binary, "export", folder + "/ckpt", "--out", folder + "/exported"])
        trainer = trl_trainer(folder, pairs, adapter)
        check_tokens(trainer, folder + "/train.u16")
        trainer.train()
        compare_steps(strata_metrics(folder + "/metrics.jsonl"), Recording.steps)
        compare_weights(folder + "/exported", trainer.model, lora)
        if not lora:
            check_resume(binary, folder, config, strata_metrics(folder + "/metrics.jsonl"))
            first = strata_metrics(folder + "/metrics.jsonl")
            check_split(binary, folder, config, first, "tensor_parallel.autotp_size", "tensor")
            check_split(binary, folder, config, first, "sequence_parallel_size", "sequence")
    print(f"DPO {mode}: Strata matches TRL's DPOTrainer")


if __name__ == "__main__":
    main()
