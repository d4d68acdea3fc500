"""PEFT trained side by side with Strata (hf_models.py qlora and expert-lora): peft from
Strata's initial adapters, torch.optim.AdamW on one window, against Strata's losses, trained
adapters and merged folder."""
import json
import os
import sys


def _window(tokens_file):
    """FILE:N: the first N tokens of a uint16 token file, as (inputs, targets) of one row."""
    import numpy as np
    import torch
    path, n = tokens_file.rsplit(":", 1)
    tokens = torch.from_numpy(np.fromfile(path, dtype=np.uint16)[: int(n)].astype(np.int64))
    return tokens[None, :-1], tokens[None, 1:]


# QLoRA, fp32 compute, 10 AdamW steps on one window. Strata's NF4 weights dequantise to
# bitsandbytes' exactly (nf4 above), so Strata is held to peft on transformers' fp32 model
# given those dequantised weights as tightly as any fp32 comparison; peft on bitsandbytes'
# Linear4bit itself computes its matmuls with a transposed operand (other kernels, other
# rounding), and the run shows how far that alone moves peft, which bounds the looser check.
# lora_B starts at zero, so its relative differences read large: the adapters are also
# compared by what they compute (the window's logits with each side's adapters).
QLORA_TOLERANCE = {  # relative: per-step loss, the adapters' 2-norms, max |logit difference| / max |logit|
    "fp32": {"loss": 1e-5, "adapters": 1e-4, "logits": 1e-5},
    "bitsandbytes": {"loss": 1e-4, "adapters": 5e-2, "logits": 1e-2},
}
QLORA_MERGED_TOLERANCE = 3e-3   # relative 2-norm, per merged bf16 weight (bf16 rounds to 2^-9)


def _peft_train(model, inputs, targets, steps, lr, eps, after_backward=None):
    import torch
    from hf_models import training_loss
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, betas=(0.9, 0.999), eps=eps,
                            weight_decay=0.0)
    losses = []
    for _ in range(steps):
        loss = training_loss(model, model(inputs), targets)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        if after_backward:
            after_backward(opt)
        else:
            opt.step()
    return losses


def _adapter_params(model):
    return {k.replace(".default", ""): p for k, p in model.named_parameters() if ".lora_" in k}


def _compare_qlora(name, model, inputs, losses, strata_losses, strata_adapters):
    """Losses, adapters and logits (with gradients on, the training kernels) against Strata's."""
    import torch
    params = _adapter_params(model)
    if set(params) != set(strata_adapters):
        raise SystemExit(f"adapter tensors differ: {sorted(set(params) ^ set(strata_adapters))[:4]}")
    got = {"loss": max(abs(a - b) / abs(b) for a, b in zip(strata_losses, losses)),
           "adapters": max(((p - strata_adapters[k]).norm() / p.norm()).item() for k, p in params.items())}
    theirs = model(inputs).logits.float().detach()
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(strata_adapters[k])
    ours = model(inputs).logits.float().detach()
    got["logits"] = ((ours - theirs).abs().max() / theirs.abs().max()).item()
    tol = QLORA_TOLERANCE[name]
    print(f"peft on {name} ({len(losses)} steps, losses {losses[0]:.5f} -> {losses[-1]:.5f}): relative differences "
          f"from Strata's: " + ", ".join(f"{k} {v:.3g} (tolerance {tol[k]})" for k, v in got.items()))
    return all(got[k] <= tol[k] for k in tol) and losses[-1] < losses[0]


def qlora(d, tokens_file, steps, lr, init_adapter, losses_file, adapter, merged):
    """QLoRA: Strata's run (LOSSES, its trained ADAPTER folder and merged bf16 folder MERGED)
    against peft from Strata's initial adapters INIT_ADAPTER, trained by torch.optim.AdamW on
    the one window TOKENS, over DIR's model (a) in 4 bits by bitsandbytes (NF4, double
    quantisation, fp32 compute) and (b) in fp32 with bitsandbytes' dequantised weights."""
    import torch
    import bitsandbytes as bnb
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig
    torch._dynamo.config.disable = True  # bitsandbytes' CPU paths compile otherwise (see nf4)
    inputs, targets = _window(tokens_file)
    strata_losses = json.load(open(losses_file))
    strata_adapters = {k: v.float() for k, v in load_file(os.path.join(adapter, "adapter_model.safetensors")).items()}
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                               bnb_4bit_compute_dtype=torch.float32)
    four_bit = AutoModelForCausalLM.from_pretrained(d, quantization_config=quant, dtype=torch.float32, device_map="cpu")
    # Dequantised now: bitsandbytes repacks a 4-bit weight for its CPU kernels at the first
    # forward without gradients, after which dequantize_4bit no longer reads it.
    with torch.no_grad():
        dequantised = {name + ".weight": bnb.functional.dequantize_4bit(m.weight.data, m.weight.quant_state).float()
                       for name, m in four_bit.named_modules() if isinstance(m, bnb.nn.Linear4bit)}
        fp32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        for key, w in dequantised.items():
            fp32.get_parameter(key).copy_(w)
    ok = len(dequantised) > 0
    runs = {}
    for name, base in (("bitsandbytes", four_bit), ("fp32", fp32)):
        model = PeftModel.from_pretrained(base, init_adapter, is_trainable=True)
        losses = _peft_train(model, inputs, targets, int(steps), float(lr), 1e-8)
        runs[name] = (losses, {k: p.detach().clone() for k, p in _adapter_params(model).items()})
        ok = _compare_qlora(name, model, inputs, losses, strata_losses, strata_adapters) and ok
    (l4, a4), (l32, a32) = runs["bitsandbytes"], runs["fp32"]
    print(f"peft on bitsandbytes against peft on fp32 (the same weights): loss "
          f"{max(abs(a - b) / abs(b) for a, b in zip(l4, l32)):.3g}, adapters "
          f"{max(((a4[k] - a32[k]).norm() / a32[k].norm()).item() for k in a32):.3g}")
    # The merged folder: each quantised projection dequantised plus Strata's adapter, the rest as loaded.
    merged_sd = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.bfloat16).state_dict()
    scale = json.load(open(os.path.join(adapter, "adapter_config.json")))
    scale = scale["lora_alpha"] / scale["r"]
    merged_diff = 0.0
    for key, w in dequantised.items():
        a = strata_adapters.get("base_model.model." + key.replace(".weight", ".lora_A.weight"))
        b = strata_adapters.get("base_model.model." + key.replace(".weight", ".lora_B.weight"))
        if a is not None:
            w = w + scale * (b @ a)
        merged_diff = max(merged_diff, ((merged_sd[key].float() - w).norm() / w.norm()).item())
    print(f"merged bf16 folder: {len(dequantised)} quantised weights within {merged_diff:.3g} of the dequantised "
          f"base + alpha/r * B @ A (tolerance {QLORA_MERGED_TOLERANCE})")
    sys.exit(0 if ok and merged_diff <= QLORA_MERGED_TOLERANCE else 1)


class _HeldExperts:
    """For the check's teeth: AdamW stepping PEFT's expert adapters except the slices (and
    moments) of the experts no token chose in the step, held as full fine-tuning holds an
    unchosen expert. PEFT steps them (one parameter, zeros in their gradient), and Strata must
    too, so this run must not match Strata's."""

    def __init__(self, model):
        from hf_models import torch_bincount
        self.bincount, self.chosen, self.adapters, self.unchosen = torch_bincount, {}, [], 0
        for name, m in model.named_modules():
            if type(m).__name__.endswith("Experts") and hasattr(m, "num_experts"):  # transformers' fused experts
                layer = name[: name.index(".mlp.experts")]  # (under PEFT's wrappers: ...experts.base_layer...)
                self.chosen[layer] = None
                m.register_forward_pre_hook(self._record(layer))
        for name, p in model.named_parameters():
            if ".mlp.experts." in name and ".lora_" in name:
                self.adapters.append((p, name[: name.index(".mlp.experts")], ".lora_A" in name))

    def _record(self, name):
        def record(module, args):  # experts(hidden_states, top_k_index, top_k_weights)
            self.chosen[name] = self.bincount(args[1], module.num_experts) > 0
        return record

    def step(self, opt):
        import torch
        held = []
        for p, owner, is_a in self.adapters:
            chosen = self.chosen[owner]
            E = chosen.numel()
            rows = torch.arange(p.shape[0 if is_a else 1])
            mask = ~chosen[rows // (p.shape[0] // E)] if is_a else ~chosen[rows % E]
            state = opt.state.get(p, {})
            keep = [(t, t.detach().clone()) for t in [p.data] + [state[k] for k in ("exp_avg", "exp_avg_sq") if k in state]]
            held.append((mask, is_a, keep))
        self.unchosen += sum(int((~c).sum()) for c in self.chosen.values())
        opt.step()
        with torch.no_grad():
            for mask, is_a, keep in held:
                for t, before in keep:
                    if is_a:
                        t[mask] = before[mask]
                    else:
                        t[:, mask] = before[:, mask]


def expert_lora(d, tokens_file, steps, lr, init_adapter, losses_file, adapter, merged):
    """LoRA on a mixture of experts' attention and experts (PEFT's target_parameters on
    transformers' fused expert tensors): Strata's run (LOSSES, its trained ADAPTER and merged
    fp32 folder MERGED) against peft from Strata's initial adapters INIT_ADAPTER trained by
    torch.optim.AdamW on the window TOKENS; then the same with unchosen experts' slices held,
    which must not match."""
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM
    from hf_models import TOLERANCE
    inputs, targets = _window(tokens_file)
    strata_losses = json.load(open(losses_file))
    strata_adapters = {k: v.float() for k, v in load_file(os.path.join(adapter, "adapter_model.safetensors")).items()}
    experts = [k for k in strata_adapters if ".mlp.experts." in k]
    if not experts or any(strata_adapters[k].norm() == 0 for k in experts if ".lora_B" in k):
        raise SystemExit(f"Strata's adapter has no trained expert adapters: {sorted(strata_adapters)[:6]}")
    runs = {}
    for held in (False, True):
        base = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        model = PeftModel.from_pretrained(base, init_adapter, is_trainable=True)
        hold = _HeldExperts(model) if held else None
        losses = _peft_train(model, inputs, targets, int(steps), float(lr), 1e-8, hold.step if hold else None)
        if held:
            theirs = {k: p.detach() for k, p in _adapter_params(model).items()}
            off = max(((theirs[k] - strata_adapters[k]).norm() / theirs[k].norm()).item() for k in experts)
            print(f"peft with the {hold.unchosen} unchosen (step, layer, expert) slices held: expert adapters "
                  f"{off:.3g} from Strata's (must exceed {QLORA_TOLERANCE['fp32']['adapters']})")
            runs["held"] = hold.unchosen > 0 and off > QLORA_TOLERANCE["fp32"]["adapters"]
            continue
        runs["peft"] = _compare_qlora("fp32", model, inputs, losses, strata_losses, strata_adapters)
        with torch.no_grad():  # the model now holds Strata's adapters (_compare_qlora)
            peft_out = model(inputs).logits.float()
            merged_out = AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)(inputs).logits.float()
        vs_merged = (merged_out - peft_out).abs().max().item()
        print(f"merged folder: max |logits - PeftModel's with Strata's adapters| = {vs_merged:.3g} "
              f"(tolerance {TOLERANCE}); {len(experts)} expert adapter tensors")
        runs["merged"] = vs_merged <= TOLERANCE
    sys.exit(0 if all(runs.values()) else 1)
