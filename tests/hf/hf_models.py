"""Hugging Face transformers side of the checkpoint tests (no network: random init).

  hf_models.py check [MODULE...]     exit 0 when torch + transformers + safetensors (and the
                                     MODULEs, e.g. peft, bitsandbytes) are installed
  hf_models.py make ARCH DIR         a small randomly initialised model of ARCH (gpt2, llama,
                                     mistral, qwen2, qwen3, phi3, phi4, gemma2, gemma3, mixtral,
                                     qwen3moe, olmoe, and their sparse variants of 64 experts:
                                     mixtral_sparse, qwen3moe_sparse, olmoe_sparse) saved with save_pretrained into
                                     DIR in at least 3 shards (model.safetensors.index.json),
                                     plus DIR/strata_model.json (the same model as
                                     strata.model keys), DIR/reference.safetensors (tokens,
                                     transformers' logits) and small tokenizer side files
  hf_models.py logits DIR WEIGHTS    loads WEIGHTS into transformers and prints the largest
                                     |logits - DIR's reference|; exits 1 above the tolerance.
                                     WEIGHTS: a model folder (from_pretrained as is) or a
                                     .safetensors file (read with DIR's config.json)
  hf_models.py generate DIR N IDS... transformers' greedy generate (do_sample=False) of N new
                                     tokens after the prompt IDS; prints the new ids
  hf_models.py CMD ARGS + CMD ARGS   several commands in one interpreter, in order
  hf_models.py peft DIR ADAPTER LOGITS MERGED
                                     LoRA: DIR's model with the PEFT adapter folder ADAPTER
                                     (PeftModel.from_pretrained) against LOGITS (a .safetensors
                                     of tokens and Strata's logits), and the merged model folder
                                     MERGED against that PeftModel; prints the largest
                                     differences and how far the adapter moves DIR's logits;
                                     exits 1 above the tolerance (or if the adapter moves nothing)
  hf_models.py optimizer DIR TOKENS STEPS NAME LR WD STRATA LOSSES
                                     Lion and Adagrad as hf_models.py decay trains AdamW
                                     (optimizer_peers.py)
  hf_models.py examples DIR EXAMPLES
                                     packing: each example of EXAMPLES (JSON {"examples": [[ids]],
                                     "losses": [Strata's loss of each, packed]}) run alone through
                                     DIR's model; exits 1 when a loss differs by more than
                                     EXAMPLE_TOLERANCE (relative)
  hf_models.py nf4 OUT               bitsandbytes' NF4 (double quantisation) of a few tensors,
                                     with the tensors, into the safetensors file OUT
  hf_models.py qlora DIR TOKENS STEPS LR INIT_ADAPTER LOSSES ADAPTER MERGED
                                     QLoRA: peft with the adapter folder INIT_ADAPTER trained by
                                     torch.optim.AdamW for STEPS on the window TOKENS (as decay)
                                     over DIR's model in 4 bits (bitsandbytes NF4, double
                                     quantisation) and over its dequantised fp32 weights, against
                                     Strata's LOSSES, trained ADAPTER folder and merged bf16
                                     folder MERGED; exits 1 beyond the QLORA_* tolerances
  hf_models.py expert-lora DIR TOKENS STEPS LR INIT_ADAPTER LOSSES ADAPTER MERGED
                                     LoRA on a mixture of experts' attention and experts (PEFT's
                                     target_parameters): peft trained as for qlora over DIR's fp32
                                     model, against Strata's LOSSES, ADAPTER and merged fp32
                                     folder MERGED, and a run holding unchosen experts' slices,
                                     which must differ (peft_training.py)
  hf_models.py decay DIR TOKENS STEPS LR WD STRATA LOSSES [EXPERTS]
                                     weight-decay groups: DIR's model trained by torch.optim.AdamW
                                     for STEPS steps on the one window TOKENS (FILE:N, the first N
                                     tokens of a uint16 token file: seq + 1) with Hugging Face Trainer's
                                     parameter groups (decay WD, none for get_decay_parameter_names'
                                     exclusions), against STRATA (an exported folder after as many
                                     steps) and LOSSES (a JSON list of Strata's losses); prints
                                     the largest relative differences (per tensor, in the 2-norm), and those of a run that
                                     decays everything; exits 1 when Trainer's groups are not
                                     within DECAY_TOLERANCE or everything-decayed is as close. With
                                     experts that no token chose in a step: EXPERTS "all" (Strata's
                                     default) is matched with transformers' fused expert tensors
                                     stepped whole, "chosen" with each expert its own parameter,
                                     skipped when unchosen; the other way must not be as close, and
                                     the reference's own noise floor (from weights jittered by
                                     1e-7) is printed beside
"""
import glob
import json
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from peer_env import ensure_library_path  # noqa: E402  (scripts/peer_env.py)

TOLERANCE = 1e-4  # fp32 logits, same weights, different kernels
SHARD = "100KB"   # the models below are 0.3-0.6 MB: 3 or more shards each


def _model(arch):
    """A tiny model of each family, exercising what sets it apart."""
    import transformers as t
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5)
    if arch == "gpt2":  # Conv1D transposes, tied head, a position table longer than seq_len
        cfg = t.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, layer_norm_epsilon=1e-5,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        return t.GPT2LMHeadModel(cfg)
    if arch == "llama":  # LLaMA 3.1's rope scaling (all three frequency bands at head dim 16), GQA, untied
        cfg = t.LlamaConfig(**common, tie_word_embeddings=False, rope_theta=500000.0,
                            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 16})
        return t.LlamaForCausalLM(cfg)
    if arch == "mistral":  # a sliding window no shorter than the sequences
        cfg = t.MistralConfig(**common, sliding_window=32, tie_word_embeddings=False, rope_theta=10000.0)
        return t.MistralForCausalLM(cfg)
    if arch == "qwen2":  # q/k/v biases, tied embeddings
        cfg = t.Qwen2Config(**common, tie_word_embeddings=True, rope_theta=1000000.0)
        return t.Qwen2ForCausalLM(cfg)
    if arch == "qwen3":  # q/k RMSNorm per head, head_dim 32 != 64 / 4
        cfg = t.Qwen3Config(**common, head_dim=32, tie_word_embeddings=False, rope_theta=1000000.0)
        return t.Qwen3ForCausalLM(cfg)
    if arch == "phi3":  # q/k/v fused in qkv_proj, gate/up in gate_up_proj; GQA; a small vocabulary's pad id
        cfg = t.Phi3Config(**common, tie_word_embeddings=False, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        return t.Phi3ForCausalLM(cfg)
    # The router's load-balancing loss in the training loss, at a coefficient that moves it.
    if arch == "phi4":  # Phi-4-mini's shape: RoPE on half of each head, longrope's short factors, tied
        cfg = t.Phi3Config(**dict(common, max_position_embeddings=256), original_max_position_embeddings=64,
                           partial_rotary_factor=0.5, tie_word_embeddings=True, pad_token_id=0, bos_token_id=0,
                           eos_token_id=0, rope_scaling={"type": "longrope", "long_factor": [1.0, 1.5, 2.0, 3.0],
                                                         "short_factor": [1.0, 1.1, 1.25, 1.5]})
        return t.Phi3ForCausalLM(cfg)
    moe = dict(common, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.05)
    moe.pop("intermediate_size")
    if arch == "mixtral":  # 4 experts (w1/w3/w2 names), top-2 renormalised
        return t.MixtralForCausalLM(t.MixtralConfig(**moe, intermediate_size=96, num_local_experts=4,
                                                    tie_word_embeddings=False))
    if arch == "qwen3moe":  # 4 experts of 32, top-2 renormalised, q/k norms, the first layer dense
        return t.Qwen3MoeForCausalLM(t.Qwen3MoeConfig(**moe, intermediate_size=96, moe_intermediate_size=32,
                                                      num_experts=4, norm_topk_prob=True, head_dim=16,
                                                      mlp_only_layers=[0], tie_word_embeddings=False))
    if arch == "qwen3moe_sparse":  # 64 experts of 16, top-2: a window of 32 tokens leaves many unchosen
        return t.Qwen3MoeForCausalLM(t.Qwen3MoeConfig(**moe, intermediate_size=96, moe_intermediate_size=16,
                                                      num_experts=64, norm_topk_prob=True, head_dim=16,
                                                      tie_word_embeddings=False))
    if arch == "mixtral_sparse":  # 64 experts of 16, top-2: many unchosen in each step, as in qwen3moe_sparse
        return t.MixtralForCausalLM(t.MixtralConfig(**moe, intermediate_size=16, num_local_experts=64,
                                                    tie_word_embeddings=False))
    if arch == "olmoe_sparse":  # 64 experts of 16, top-2 not renormalised
        return t.OlmoeForCausalLM(t.OlmoeConfig(**moe, intermediate_size=16, num_experts=64, norm_topk_prob=False,
                                                pad_token_id=0, bos_token_id=0, eos_token_id=0))
    if arch == "olmoe":  # 4 experts, top-2 not renormalised, q/k norms over the whole projections
        return t.OlmoeForCausalLM(t.OlmoeConfig(**moe, intermediate_size=32, num_experts=4, norm_topk_prob=False,
                                                pad_token_id=0, bos_token_id=0, eos_token_id=0))
    gemma = dict(common, head_dim=16, query_pre_attn_scalar=24, sliding_window=48)
    if arch == "gemma2":  # soft-capped attention and logits, scores scaled by 24^-1/2 (not head_dim's), GQA, tied
        return t.Gemma2ForCausalLM(t.Gemma2Config(**gemma))
    if arch == "gemma3":  # q/k norms, a sliding layer with its own RoPE base before a global one
        cfg = t.Gemma3TextConfig(**gemma, layer_types=["sliding_attention", "full_attention"],
                                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                  "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
        return t.Gemma3ForCausalLM(cfg)
    raise SystemExit(f"unknown arch {arch}")


def make(arch, out):
    import torch
    from safetensors.torch import save_file
    torch.manual_seed(0)
    model = _model(arch)
    with torch.no_grad():  # HF starts norms at 1 and biases at 0: perturb them so they are tested too
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(out, safe_serialization=True, max_shard_size=SHARD)
    shards = glob.glob(os.path.join(out, "model-*-of-*.safetensors"))
    if len(shards) < 3:
        raise SystemExit(f"{arch}: only {len(shards)} shard(s); lower SHARD")
    for name, text in [("tokenizer_config.json", '{"model_max_length": 64}\n'),
                       ("special_tokens_map.json", '{"eos_token": "<eos>"}\n')]:
        with open(os.path.join(out, name), "w") as f:
            f.write(text)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 256, (2, 16), generator=g)
    with torch.no_grad():
        logits = model(tokens).logits.float().contiguous()
    save_file({"tokens": tokens.contiguous(), "logits": logits}, os.path.join(out, "reference.safetensors"))
    print(f"made {arch} in {out}: {len(shards)} shards")


def logits(d, weights):
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    ref = load_file(os.path.join(d, "reference.safetensors"))
    if os.path.isdir(weights):
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            shutil.copy(os.path.join(d, "config.json"), tmp)
            shutil.copy(weights, os.path.join(tmp, "model.safetensors"))
            model = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        out = model(ref["tokens"]).logits.float()
    diff = (out - ref["logits"]).abs().max().item()
    print(f"{type(model).__name__}: max |logits - reference| = {diff:.3g} (tolerance {TOLERANCE})")
    sys.exit(0 if diff <= TOLERANCE else 1)


def generate(d, n, ids):
    """n greedy tokens; with --stop-at-eos first, up to the folder's eos_token_id (included)."""
    import torch
    from transformers import AutoModelForCausalLM
    stop_at_eos = ids[:1] == ["--stop-at-eos"]
    ids = ids[1:] if stop_at_eos else ids
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    model.eval()
    prompt = torch.tensor([[int(i) for i in ids]])
    with torch.no_grad():  # without eos: exactly n tokens, as strata generate --ignore-eos
        out = model.generate(prompt, do_sample=False, max_new_tokens=n, min_new_tokens=None if stop_at_eos else n,
                             attention_mask=torch.ones_like(prompt), pad_token_id=0)
    print(" ".join(str(t) for t in out[0, prompt.shape[1]:].tolist()))


def set_eos(d, eos):
    """eos_token_id = eos in the folder's config.json and generation_config.json."""
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(d, name)
        if os.path.exists(path) or name == "generation_config.json":
            cfg = json.load(open(path)) if os.path.exists(path) else {}
            cfg["eos_token_id"] = int(eos)
            json.dump(cfg, open(path, "w"), indent=2)


def peft_logits(d, adapter, strata_logits, merged):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    ref = load_file(strata_logits)
    base = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    with torch.no_grad():
        base_out = base(ref["tokens"]).logits.float()
        model = PeftModel.from_pretrained(base, adapter).eval()  # wraps base in place
        peft_out = model(ref["tokens"]).logits.float()
        merged_out = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval()(ref["tokens"]).logits.float()
    vs_strata = (peft_out - ref["logits"]).abs().max().item()
    vs_merged = (merged_out - peft_out).abs().max().item()
    moved = (peft_out - base_out).abs().max().item()
    print(f"PeftModel: max |logits - Strata's| = {vs_strata:.3g}; merged folder: max |logits - PeftModel's| = "
          f"{vs_merged:.3g} (tolerance {TOLERANCE}); the adapter moves the base's logits by up to {moved:.3g}")
    sys.exit(0 if vs_strata <= TOLERANCE and vs_merged <= TOLERANCE and moved > 100 * TOLERANCE else 1)


# fp32, 20 AdamW steps: ||theirs - Strata's|| / ||theirs|| per tensor. (Not element by element:
# Adam divides by sqrt(v), so an element whose gradient is near zero steps by lr either way
# on rounding noise alone.)
DECAY_TOLERANCE = 1e-5
# With unchosen experts, Strata's weights also lie within this many times the reference's own
# difference from itself started from weights jittered by 1e-7 (its noise floor).
NOISE_FACTOR = 3


class _Experts:
    """transformers 5 stores a layer's experts fused ([E, ...] tensors), so torch.optim.AdamW
    steps every expert of it, chosen or not (a zero gradient decays the moments and the weight,
    one step count): what Strata's strata.expert_update "all" does. `split`: each expert its own
    parameter instead, a view of its slice of the fused tensor, whose gradient is None in a step
    where no token chose it, so that AdamW skips it as it skips a per-expert nn.Linear
    (transformers 4): what "chosen" does. Either way counts the (step, layer, expert) no token
    chose."""

    def __init__(self, model, split):
        import torch
        self.views, self.chosen, self.unchosen = {}, {}, 0
        modules = dict(model.named_modules())
        for name, p in model.named_parameters():
            owner = name.rsplit(".", 1)[0]
            if p.dim() == 3 and owner.endswith(".experts"):
                if split:
                    self.views[name] = (p, owner, [torch.nn.Parameter(p.data[e]) for e in range(p.shape[0])])
                if owner not in self.chosen:
                    self.chosen[owner] = torch.zeros(p.shape[0], dtype=torch.bool)
                    modules[owner].register_forward_pre_hook(self._hook(owner))

    def _hook(self, owner):
        def record(module, args):  # experts(hidden_states, top_k_index, top_k_weights)
            self.chosen[owner] |= torch_bincount(args[1], self.chosen[owner].numel()) > 0
        return record

    def params(self, name, p):
        return self.views[name][2] if name in self.views else [p]

    def start_step(self):
        for c in self.chosen.values():
            c.zero_()

    def pass_gradients(self):  # after backward
        for c in self.chosen.values():
            self.unchosen += int((~c).sum())
        for fused, owner, views in self.views.values():
            for e, v in enumerate(views):
                v.grad = fused.grad[e].clone() if self.chosen[owner][e] else None
            fused.grad = None


def torch_bincount(index, n):
    import torch
    return torch.bincount(index.reshape(-1), minlength=n)[:n]


def training_loss(model, out, targets):
    """Mean cross-entropy of the output's logits (fp32), plus a mixture of experts' router
    loss as their forward adds it to a loss."""
    import torch.nn.functional as F
    logits = out.logits.float()
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + model.config.router_aux_loss_coef * out.aux_loss
    return loss


def _train(d, tokens, steps, lr, wd, grouped, per_expert=False, make_optimizer=None, jitter=0.0):
    """`jitter`: every weight times (1 + jitter x a standard normal draw) first (the reference's
    own noise floor)."""
    import torch
    from transformers import AutoModelForCausalLM, Trainer
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    if jitter:
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + jitter * torch.randn(p.shape, generator=g))
    decay = set(Trainer.get_decay_parameter_names(None, model)) if grouped else {n for n, _ in model.named_parameters()}
    params = dict(model.named_parameters())
    for n, p in params.items():
        p.hf_name = n  # (what a reference optimizer that splits by name reads)
    experts = _Experts(model, per_expert)
    groups = [{"params": [v for n, p in params.items() if n in decay for v in experts.params(n, p)], "weight_decay": wd},
              {"params": [v for n, p in params.items() if n not in decay for v in experts.params(n, p)],
               "weight_decay": 0.0}]
    opt = make_optimizer(groups) if make_optimizer else torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)
    inputs, targets = tokens[None, :-1], tokens[None, 1:]
    losses = []
    for _ in range(steps):
        experts.start_step()
        loss = training_loss(model, model(inputs), targets)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        experts.pass_gradients()
        opt.step()
    return model, losses, len(params) - len(decay & set(params)), experts.unchosen


def _difference(model, theirs):
    """The largest ||p - theirs|| / ||p|| over the tensors, and where."""
    worst, where = 0.0, ""
    for name, p in model.state_dict().items():
        if name in theirs:
            q = theirs[name]
            if name.endswith("attn.c_attn.bias"):
                # The key bias gets no gradient in exact arithmetic (the softmax over keys is
                # shift-invariant): both sides step it by their rounding noise, which Adam
                # scales to lr. Its query and value thirds are compared.
                third = p.numel() // 3
                p, q = torch_cat([p[:third], p[2 * third:]]), torch_cat([q[:third], q[2 * third:]])
            diff = ((p - q).norm() / p.norm().clamp_min(1e-12)).item()
            worst, where = max((worst, where), (diff, name))
    return worst, where


def torch_cat(parts):
    import torch
    return torch.cat(parts)


def decay_groups(d, tokens_file, steps, lr, wd, strata, losses_file, experts="all"):
    """`experts`: how Strata stepped a mixture's experts (strata.expert_update): "all" is matched
    with the fused tensors stepped whole, "chosen" with each expert its own parameter."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    path, n = tokens_file.rsplit(":", 1)
    tokens = torch.from_numpy(np.fromfile(path, dtype=np.uint16)[: int(n)].astype(np.int64))
    theirs = AutoModelForCausalLM.from_pretrained(strata, dtype=torch.float32).state_dict()
    strata_losses = json.load(open(losses_file))
    split = experts == "chosen"

    def run(grouped, per_expert, jitter=0.0):
        return _train(d, tokens, int(steps), float(lr), float(wd), grouped, per_expert, jitter=jitter)

    def compare(label, grouped, per_expert=split):
        model, losses, undecayed, unchosen = run(grouped, per_expert)
        worst, where = _difference(model, theirs)
        loss_diff = max(abs(a - b) / abs(b) for a, b in zip(strata_losses, losses))
        print(f"{label} ({undecayed} tensors undecayed; {unchosen} (step, layer, expert) no token chose): max "
              f"relative |weights - Strata's| = {worst:.3g} ({where}), |loss - Strata's| = {loss_diff:.3g} "
              f"(tolerance {DECAY_TOLERANCE})")
        return worst, loss_diff, unchosen, model, losses

    groups = compare("Trainer groups" + (", each expert its own parameter" if split else ""), True)
    ok = max(groups[:2]) <= DECAY_TOLERANCE and compare("all decayed", False)[0] > 10 * DECAY_TOLERANCE
    if groups[2] > 0:  # unchosen experts are what the test sees: the other way is not as close
        other = "each expert its own parameter, skipped when unchosen" if not split else "fused experts stepped whole"
        ok = ok and compare(other, True, per_expert=not split)[0] > 10 * DECAY_TOLERANCE
        # The reference against itself from weights jittered by 1e-7: how far it moves on its own.
        jittered, jittered_losses, _, _ = run(True, split, jitter=1e-7)
        floor, where = _difference(jittered, groups[3].state_dict())
        floor_loss = max(abs(a - b) / abs(b) for a, b in zip(groups[4], jittered_losses))
        print(f"noise floor (the reference from weights jittered by 1e-7): weights {floor:.3g} ({where}), loss "
              f"{floor_loss:.3g}; Strata: weights {groups[0]:.3g}, loss {groups[1]:.3g} (within {NOISE_FACTOR} x "
              f"the floor's weights: {'yes' if groups[0] <= NOISE_FACTOR * floor else 'NO'})")
        ok = ok and groups[0] <= NOISE_FACTOR * floor
    sys.exit(0 if ok else 1)


EXAMPLE_TOLERANCE = 1e-5  # relative, on each example's mean cross-entropy (fp32 both sides)


def example_losses(d, examples_file):
    """Each example of EXAMPLES (JSON: {"examples": [[ids...], ...], "losses": [Strata's mean
    cross-entropy of each, packed with the others]}) run through transformers alone."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    given = json.load(open(examples_file))
    worst = 0.0
    with torch.no_grad():
        for ids, strata in zip(given["examples"], given["losses"]):
            ids = torch.tensor([ids])
            logits = model(ids).logits.float()
            loss = F.cross_entropy(logits[0, :-1], ids[0, 1:]).item()
            worst = max(worst, abs(loss - strata) / abs(loss))
    print(f"{type(model).__name__}: {len(given['examples'])} examples alone, max relative |loss - Strata's packed "
          f"loss| = {worst:.3g} (tolerance {EXAMPLE_TOLERANCE})")
    sys.exit(0 if worst <= EXAMPLE_TOLERANCE else 1)


def nf4(out):
    """Tensors and bitsandbytes' NF4 of each (quantize_4bit, blocksize 64, double quantisation)."""
    import torch
    import bitsandbytes.functional as F
    from safetensors.torch import save_file
    # bitsandbytes' CPU dequantisation of a tensor whose last block is partial goes through
    # torch.compile, 20 s of compiling here for the same arithmetic eagerly.
    torch._dynamo.config.disable = True
    g = torch.Generator().manual_seed(3)
    cases = {"square": torch.randn(128, 64, generator=g) * 0.02,
             "tail": torch.randn(300, 77, generator=g),           # a last block of 60, 361 blocks
             "odd": torch.randn(3, 33, generator=g) * 5,          # one block of 99: padded to even
             "bf16": (torch.randn(512, 1024, generator=g) * 0.02).to(torch.bfloat16),
             "zeros": torch.cat([torch.zeros(4, 64), torch.randn(60, 64, generator=g)])}
    tensors = {}
    for name, w in cases.items():
        q, st = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
        tensors[name + ".weight"] = w.contiguous()
        tensors[name + ".packed"] = q.reshape(-1).contiguous()
        tensors[name + ".absmax_q"] = st.absmax.reshape(-1).contiguous()
        tensors[name + ".absmax2"] = st.state2.absmax.reshape(-1).float().contiguous()
        tensors[name + ".offset"] = st.offset.reshape(1).float()
        tensors[name + ".dequant"] = F.dequantize_4bit(q, st).float().contiguous()
    tensors["nf4_code"] = F.get_4bit_type("nf4", device="cpu").float()
    tensors["dynamic_code"] = F.create_dynamic_map().float()
    save_file(tensors, out)
    print(f"bitsandbytes NF4 of {len(cases)} tensors in {out}")


def check(args):
    """Installed, found without importing them (an import of torch + transformers takes
    seconds, and every test asks): a peer that is present but broken fails the test's own
    call instead, with its error."""
    import importlib.metadata as metadata
    import importlib.util as util
    wanted = ["safetensors", "transformers", "torch"] + list(args)  # and e.g. peft, bitsandbytes
    missing = [name for name in wanted if util.find_spec(name) is None]
    if missing:
        print(f"cannot find {', '.join(missing)}")
        sys.exit(1)
    print("ok " + " ".join(f"{name} {metadata.version(name)}" for name in wanted))


def run(cmd, args):
    if cmd in ("make", "logits", "generate", "peft", "decay", "optimizer", "examples", "qlora", "expert-lora"):  # nf4 needs no transformers
        from transformers.utils import logging
        logging.disable_progress_bar()
    if cmd == "check":
        check(args)
    elif cmd == "make":
        make(args[0], args[1])
    elif cmd == "logits":
        logits(args[0], args[1])
    elif cmd == "generate":
        generate(args[0], int(args[1]), args[2:])
    elif cmd == "set-eos":
        set_eos(args[0], args[1])
    elif cmd == "peft":
        peft_logits(*args[0:4])
    elif cmd == "decay":
        decay_groups(*args[0:8])
    elif cmd == "optimizer":
        from optimizer_peers import compare_optimizer
        compare_optimizer(*args[0:8], train=lambda d, t, steps, lr, wd, grouped, make, jitter: _train(
            d, t, steps, lr, wd, grouped, per_expert=False, make_optimizer=make, jitter=jitter))
    elif cmd == "muon-exact":
        from optimizer_peers import muon_exact
        muon_exact(args[0])
    elif cmd == "examples":
        example_losses(args[0], args[1])
    elif cmd == "nf4":
        nf4(args[0])
    elif cmd == "qlora":
        from peft_training import qlora
        qlora(*args[0:8])
    elif cmd == "expert-lora":
        from peft_training import expert_lora
        expert_lora(*args[0:8])
    else:
        sys.exit(f"hf_models.py: unknown command {cmd!r}")


def main():
    ensure_library_path()
    # Commands joined by "+" run in this one interpreter, in order: torch and transformers
    # are imported once.
    commands, current = [], []
    for word in sys.argv[1:] + ["+"]:
        if word == "+":
            commands.append(current)
            current = []
        else:
            current.append(word)
    for command in commands:
        run(command[0], command[1:])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
