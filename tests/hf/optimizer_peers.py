"""Optimizers other than AdamW, trained side by side with Strata (hf_models.py optimizer).

  optimizer DIR TOKENS STEPS NAME LR WD STRATA LOSSES
      DIR's model trained for STEPS steps on the one window TOKENS (as hf_models.py decay) by
      NAME ("lion", "adagrad", "lamb", "muon_torch", "muon_deepspeed") at LR with Hugging Face Trainer's decay groups (WD, none for
      get_decay_parameter_names' exclusions), against STRATA (an exported folder after as
      many steps) and LOSSES (Strata's per-step losses): exits 1 when a tensor (2-norm) or a
      loss differs by more than OPTIMIZER_TOLERANCE (relative), or when a run with every
      tensor decayed is as close (so the groups and the decay are what the test sees).

Adagrad is torch.optim.Adagrad (what DeepSpeed 0.19.8 builds when the optimizer is not
offloaded; its DeepSpeedCPUAdagrad computes the same formula). Lion is DeepSpeedCPULion's
kernel (csrc/includes/cpu_lion.h) written out in torch, operation for operation, its fused
multiply-adds as one rounding (a product of two floats is exact in double); building
DeepSpeed's op in every test run would cost a minute of compiling. LAMB is DeepSpeed's
FusedLamb (csrc/lamb/fused_lamb_cuda_kernel.cu, a CUDA-only op) written out in torch: its
formula per parameter tensor, its fp32 constants and its clamped trust ratio. Muon is
torch.optim.Muon for the parameters DeepSpeed gives Muon (two dimensions or more, no "embed" or
"lm_head" in the name) plus torch.optim.AdamW for the rest (betas (0.9, 0.95), eps 1e-10, as
MuonWithAuxAdam's defaults), against Strata's ns_method "torch"; or DeepSpeed 0.19.8's own
MuonWithAuxAdam (its muon_update and its inline Adam, run eagerly: torch.compile would spend a
minute per matrix shape compiling the same operations), against Strata's default "gram".
Strata's config gives the Muon half MUON_LR and the AdamW half LR.
"""
import json
import sys

OPTIMIZER_TOLERANCE = 1e-5


def _fused(a, b, c):
    """fma(a, b, c) in float: the product exact in double, one rounding of the sum (twice, to
    double and to float, which differs from one rounding only in halfway cases)."""
    import torch
    return (a.double() * b.double() + c.double()).to(torch.float32)


class _ReferenceOptimizer:
    """What the training loop asks of an optimizer besides step(): zero_grad, and the
    parameters to step with their group's weight decay."""

    def __init__(self, groups):
        self.groups = groups

    def zero_grad(self):
        for g in self.groups:
            for p in g["params"]:
                p.grad = None

    def _with_grads(self):
        for group in self.groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield group["weight_decay"], p


class DeepSpeedCpuLion(_ReferenceOptimizer):
    """DeepSpeedCPULion's step on fp32 tensors: c = fma(g, 1-b1, b1 m); p = fma(p, 1 - lr wd,
    -lr sign(c)) with sign(+-0) = +-1 (DeepSpeed takes c's sign bit), or p + that without decay;
    m = fma(g, 1-b2, b2 m). Its constants are fp32, as the kernel's are."""

    def __init__(self, groups, lr, betas=(0.9, 0.999)):
        import torch
        super().__init__(groups)
        self.lr, self.betas = lr, betas
        self.m = {id(p): torch.zeros_like(p) for g in groups for p in g["params"]}

    @staticmethod
    def _f32(x):
        import torch
        return torch.tensor(x, dtype=torch.float32)

    def step(self):
        import torch
        b1, b2 = self.betas
        with torch.no_grad():
            for wd, p in self._with_grads():
                g, m = p.grad, self.m[id(p)]
                c = _fused(g, self._f32(1 - b1), m * self._f32(b1))
                lr = self._f32(self.lr)
                step = torch.where(torch.signbit(c), lr, -lr)
                if wd > 0:
                    p.copy_(_fused(p, self._f32(1 - self.lr * wd), step))
                else:
                    p.add_(step)
                m.copy_(_fused(g, self._f32(1 - b2), m * self._f32(b2)))


class FusedLambFormula(_ReferenceOptimizer):
    """FusedLamb's step on fp32 tensors, per parameter: m = b1 m + (1-b1) g, v = b2 v +
    (1-b2) g^2, u = m / (sqrt(v) + eps) + wd p, trust = clamp(||p|| / ||u||, 0.01, 10) (1 where
    a norm is 0), p -= (lr sqrt(1 - b2^t) / (1 - b1^t)) trust u, the step size in fp32."""

    def __init__(self, groups, lr, betas=(0.9, 0.999), eps=1e-8, min_coeff=0.01, max_coeff=10.0):
        import torch
        super().__init__(groups)
        self.lr, self.betas, self.eps = lr, betas, eps
        self.min_coeff, self.max_coeff, self.t = min_coeff, max_coeff, 0
        self.m = {id(p): torch.zeros_like(p) for g in groups for p in g["params"]}
        self.v = {id(p): torch.zeros_like(p) for g in groups for p in g["params"]}

    def step(self):
        import numpy as np
        import torch
        b1, b2 = self.betas
        self.t += 1
        f = np.float32
        # As fused_lamb_cuda: 1 - std::pow(float beta, step) in double, then fp32 arithmetic.
        bc1, bc2 = f(1 - float(f(b1)) ** self.t), f(1 - float(f(b2)) ** self.t)
        step_size = f(self.lr) * np.sqrt(bc2) / bc1
        with torch.no_grad():
            for wd, p in self._with_grads():
                g, m, v = p.grad, self.m[id(p)], self.v[id(p)]
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                u = m / (v.sqrt() + self.eps) + wd * p
                w_norm, u_norm = p.double().norm().item(), u.double().norm().item()
                trust = 1.0
                if w_norm != 0 and u_norm != 0:
                    trust = min(max(f(w_norm) / f(u_norm), f(self.min_coeff)), f(self.max_coeff))
                p.sub_(u * float(f(step_size) * f(trust)))


MUON_LR = 0.02


def _muon_split(groups):
    """Each group's parameters split into DeepSpeed's Muon and AdamW halves (by the names
    hf_models.py's loop tags them with)."""
    muon, adam = [], []
    for g in groups:
        def takes_muon(p):
            return p.ndim >= 2 and not any(k in p.hf_name.lower() for k in ("embed", "lm_head"))
        mine = [p for p in g["params"] if takes_muon(p)]
        rest = [p for p in g["params"] if not takes_muon(p)]
        if mine:
            muon.append({"params": mine, "weight_decay": g["weight_decay"]})
        if rest:
            adam.append({"params": rest, "weight_decay": g["weight_decay"]})
    return muon, adam


class TorchMuonWithAdamW(_ReferenceOptimizer):
    """torch.optim.Muon (its defaults but lr; weight decay per group) and torch.optim.AdamW."""

    def __init__(self, groups, lr):
        import torch
        super().__init__(groups)
        muon, adam = _muon_split(groups)
        self.muon = torch.optim.Muon(muon, lr=MUON_LR, momentum=0.95, nesterov=True)
        self.adam = torch.optim.AdamW(adam, lr=lr, betas=(0.9, 0.95), eps=1e-10)

    def step(self):
        self.muon.step()
        self.adam.step()


class DeepSpeedMuonWithAuxAdam(_ReferenceOptimizer):
    """DeepSpeed's MuonWithAuxAdam as its engine builds it for {"type": "Muon"} (ns_method gram)."""

    def __init__(self, groups, lr):
        from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam
        super().__init__(groups)
        muon, adam = _muon_split(groups)
        halves = [dict(g, use_muon=True, lr=MUON_LR) for g in muon] + [dict(g, use_muon=False, lr=lr) for g in adam]
        self.opt = MuonWithAuxAdam(halves)

    def step(self):
        import torch._dynamo
        with torch._dynamo.config.patch(disable=True):
            self.opt.step()


def _optimizer(name, groups, lr):
    import torch
    if name == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr, eps=1e-10)
    if name == "lion":
        return DeepSpeedCpuLion(groups, lr)
    if name == "lamb":  # (the test's clamp: min_coeff 1e-4, so that the ratios are not all at 0.01)
        return FusedLambFormula(groups, lr, min_coeff=1e-4)
    if name == "muon_torch":
        return TorchMuonWithAdamW(groups, lr)
    if name == "muon_deepspeed":
        return DeepSpeedMuonWithAuxAdam(groups, lr)
    sys.exit(f"optimizer_peers.py: unknown optimizer {name!r}")


def _max_difference(model, theirs, losses, their_losses):
    """The largest relative 2-norm difference of a tensor (and which), and of a step's loss."""
    worst, where = 0.0, ""
    for key, p in model.state_dict().items():
        if key in theirs:
            diff = ((p - theirs[key]).norm() / p.norm().clamp_min(1e-12)).item()
            worst, where = max((worst, where), (diff, key))
    return worst, where, max(abs(a - b) / abs(b) for a, b in zip(their_losses, losses))


def compare_optimizer(d, tokens_file, steps, name, lr, wd, strata, losses_file, train):
    """`train(d, tokens, steps, lr, wd, grouped, make_optimizer, jitter)`: hf_models.py's loop.
    Muon's tolerance is at least twice the reference's own noise floor: the reference against
    itself from weights jittered by 1e-7. Its orthogonalisation rounds the whole matrix (in
    bf16 for torch.optim.Muon), so that two runs whose gradients differ in the last bit (as
    Strata's and transformers' backward passes do) drift apart by far more than 1e-5 there;
    muon-exact checks it bit for bit on the same gradients."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    path, n = tokens_file.rsplit(":", 1)
    tokens = torch.from_numpy(np.fromfile(path, dtype=np.uint16)[: int(n)].astype(np.int64))
    theirs = AutoModelForCausalLM.from_pretrained(strata, dtype=torch.float32).state_dict()
    strata_losses = json.load(open(losses_file))
    make = lambda groups: _optimizer(name, groups, float(lr))  # noqa: E731
    tolerance = OPTIMIZER_TOLERANCE
    runs = {}  # grouped -> the reference's run (the floor's unjittered run is the comparison's)
    if name.startswith("muon"):
        runs[True] = train(d, tokens, int(steps), float(lr), float(wd), True, make, 0.0)
        jittered, jittered_losses, _, _ = train(d, tokens, int(steps), float(lr), float(wd), True, make, 1e-7)
        floor, _, loss_floor = _max_difference(runs[True][0], jittered.state_dict(), runs[True][1], jittered_losses)
        tolerance = max(tolerance, 2 * floor, 2 * loss_floor)
        print(f"{name}: the reference against itself jittered by 1e-7: weights {floor:.3g}, loss {loss_floor:.3g}")

    def compare(label, grouped):
        run = runs.get(grouped) or train(d, tokens, int(steps), float(lr), float(wd), grouped, make, 0.0)
        model, losses, undecayed, _ = run
        worst, where, loss_diff = _max_difference(model, theirs, losses, strata_losses)
        print(f"{name}, {label} ({undecayed} tensors undecayed): max relative |weights - Strata's| = {worst:.3g} "
              f"({where}), |loss - Strata's| = {loss_diff:.3g} over {len(losses)} steps (tolerance {tolerance:.3g})")
        return worst, loss_diff

    grouped = compare("Trainer groups", True)
    ok = max(grouped) <= tolerance
    if tolerance > 0.01:  # (a floor this high hides the groups: the gram case shows them)
        print(f"{name}: the decay groups' check left to a case with a lower floor")
    else:
        ok = ok and compare("all decayed", False)[0] > 10 * tolerance
    sys.exit(0 if ok else 1)


def muon_exact(cases_file):
    """One Muon step per case of muon_exact_test.cc on its weights, momentum and gradient:
    torch.optim.Muon for "torch", DeepSpeed's muon_update and MuonWithAuxAdam's step (eagerly)
    for "gram" and "standard"; exits 1 unless the weights and the momentum are Strata's, bit for bit."""
    import numpy as np
    import torch
    import torch._dynamo
    from deepspeed.runtime.zero.muon.original_muon import muon_update
    bad = 0
    for c in json.load(open(cases_file)):
        shape = (c["rows"], c["cols"])
        load = lambda suffix: torch.from_numpy(np.fromfile(c["path"] + suffix, dtype=np.float32).reshape(shape))  # noqa: E731
        p, m, g = load(".p"), load(".m"), load(".g")
        lr, mu, wd = c["lr"], c["momentum"], c["weight_decay"]
        with torch.no_grad():
            if c["ns_method"] == "torch":
                param = torch.nn.Parameter(p.clone())
                opt = torch.optim.Muon([param], lr=lr, weight_decay=wd, momentum=mu, nesterov=True)
                opt.state[param]["momentum_buffer"] = m.clone()
                param.grad = g.clone()
                opt.step()
                got_p, got_m = param.detach(), opt.state[param]["momentum_buffer"]
            else:
                buf = m.clone()
                with torch._dynamo.config.patch(disable=True):
                    update = muon_update(g.clone(), buf, beta=mu, ns_method=c["ns_method"])
                got_p = p.clone().mul_(1 - lr * wd).add_(update.reshape(shape), alpha=-lr)
                got_m = buf
        want_p, want_m = load(".p_after"), load(".m_after")
        differ_p = int((got_p.view(torch.int32) != want_p.view(torch.int32)).sum())
        differ_m = int((got_m.view(torch.int32) != want_m.view(torch.int32)).sum())
        worst = ((got_p - want_p).abs().max() / want_p.abs().max()).item()
        print(f"muon {c['ns_method']} {shape[0]}x{shape[1]}: {differ_p} weights and {differ_m} momenta of "
              f"{got_p.numel()} differ from Strata's (largest {worst:.3g} of the largest weight)")
        bad += differ_p + differ_m
    sys.exit(0 if bad == 0 else 1)
