"""Optimizers other than AdamW, trained side by side with Strata (hf_models.py optimizer).

  optimizer DIR TOKENS STEPS NAME LR WD STRATA LOSSES
      DIR's model trained for STEPS steps on the one window TOKENS (as hf_models.py decay) by
      NAME ("lion", "adagrad", "lamb") at LR with Hugging Face Trainer's decay groups (WD, none for
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
formula per parameter tensor, its fp32 constants and its clamped trust ratio.
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


def _optimizer(name, groups, lr):
    import torch
    if name == "adagrad":
        return torch.optim.Adagrad(groups, lr=lr, eps=1e-10)
    if name == "lion":
        return DeepSpeedCpuLion(groups, lr)
    if name == "lamb":  # (the test's clamp: min_coeff 1e-4, so that the ratios are not all at 0.01)
        return FusedLambFormula(groups, lr, min_coeff=1e-4)
    sys.exit(f"optimizer_peers.py: unknown optimizer {name!r}")


def compare_optimizer(d, tokens_file, steps, name, lr, wd, strata, losses_file, train):
    """`train(d, tokens, steps, lr, wd, grouped, make_optimizer)`: hf_models.py's loop."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    path, n = tokens_file.rsplit(":", 1)
    tokens = torch.from_numpy(np.fromfile(path, dtype=np.uint16)[: int(n)].astype(np.int64))
    theirs = AutoModelForCausalLM.from_pretrained(strata, dtype=torch.float32).state_dict()
    strata_losses = json.load(open(losses_file))

    def compare(label, grouped):
        model, losses, undecayed, _ = train(d, tokens, int(steps), float(lr), float(wd), grouped,
                                            lambda groups: _optimizer(name, groups, float(lr)))
        worst, where = 0.0, ""
        for key, p in model.state_dict().items():
            if key in theirs:
                diff = ((p - theirs[key]).norm() / p.norm().clamp_min(1e-12)).item()
                worst, where = max((worst, where), (diff, key))
        loss_diff = max(abs(a - b) / abs(b) for a, b in zip(strata_losses, losses))
        print(f"{name}, {label} ({undecayed} tensors undecayed): max relative |weights - Strata's| = {worst:.3g} "
              f"({where}), |loss - Strata's| = {loss_diff:.3g} over {len(losses)} steps (tolerance "
              f"{OPTIMIZER_TOLERANCE})")
        return worst, loss_diff

    grouped = compare("Trainer groups", True)
    ok = max(grouped) <= OPTIMIZER_TOLERANCE and compare("all decayed", False)[0] > 10 * OPTIMIZER_TOLERANCE
    sys.exit(0 if ok else 1)
