"""Hugging Face transformers side of the checkpoint tests (no network: random init).

  hf_models.py check                 exit 0 when torch + transformers + safetensors import
  hf_models.py make gpt2|llama DIR   a small randomly initialised GPT2LMHeadModel /
                                     LlamaForCausalLM saved with save_pretrained into DIR,
                                     DIR/strata_model.json (the same model as strata.model),
                                     DIR/reference.safetensors (tokens, transformers' logits)
  hf_models.py logits DIR WEIGHTS    loads WEIGHTS (e.g. strata export's output) into
                                     transformers with DIR's config.json, prints the largest
                                     |logits - reference| and exits 1 above the tolerance
"""
import glob
import json
import os
import shutil
import sys
import tempfile

TOLERANCE = 1e-4  # fp32 logits, same weights, different kernels


def _ensure_library_path():
    # PyPI's torch here is a CUDA build: it dlopens CUDA libraries even on a CPU machine.
    if os.environ.get("STRATA_PEER_ENV") == "1":
        return
    import site
    dirs = ["/usr/local/cuda/lib64"]
    for packages in site.getsitepackages():
        dirs += sorted(glob.glob(os.path.join(packages, "nvidia", "*", "lib")))
    old = os.environ.get("LD_LIBRARY_PATH", "")
    env = dict(os.environ, STRATA_PEER_ENV="1", LD_LIBRARY_PATH=":".join(dirs + ([old] if old else [])))
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def make(arch, out):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(0)
    if arch == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4, layer_norm_epsilon=1e-5,
                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        model = GPT2LMHeadModel(cfg)
        strata = {"arch": "gpt2", "vocab_size": 256, "seq_len": 32, "n_layer": 2, "d_model": 64, "n_head": 4,
                  "tie_embeddings": True, "norm_eps": 1e-5}
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                          rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg)
        strata = {"arch": "llama", "vocab_size": 256, "seq_len": 64, "n_layer": 2, "d_model": 64, "n_head": 4,
                  "n_kv_head": 2, "ffn_hidden": 192, "tie_embeddings": False, "norm_eps": 1e-5, "rope_theta": 10000.0}
    with torch.no_grad():  # HF starts norms at 1 and biases at 0: perturb them so they are tested too
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (2, 16), generator=g)
    with torch.no_grad():
        logits = model(tokens).logits.float().contiguous()
    save_file({"tokens": tokens.contiguous(), "logits": logits}, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "strata_model.json"), "w") as f:
        json.dump(strata, f)
    print(f"made {arch} in {out}")


def logits(d, weights):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    ref = load_file(os.path.join(d, "reference.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(d, "config.json"), tmp)
        shutil.copy(weights, os.path.join(tmp, "model.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        out = model(ref["tokens"]).logits.float()
    diff = (out - ref["logits"]).abs().max().item()
    print(f"max |logits - reference| = {diff:.3g} (tolerance {TOLERANCE})")
    sys.exit(0 if diff <= TOLERANCE else 1)


def main():
    _ensure_library_path()
    cmd = sys.argv[1]
    if cmd == "check":
        import safetensors  # noqa: F401  (the cheap imports first: a missing peer fails fast)
        import transformers
        import torch  # noqa: F401
        print(f"ok transformers {transformers.__version__}")
    elif cmd == "make":
        make(sys.argv[2], sys.argv[3])
    elif cmd == "logits":
        logits(sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
