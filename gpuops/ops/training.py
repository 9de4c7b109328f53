"""Optimizers of the ``ai.onnx.preview.training`` domain: Adagrad, Adam, Momentum.

Each updates any number of tensors at once: the variadic inputs are all the tensors, then all their
gradients, then all their accumulators; the outputs follow the same grouping. The update count
``T`` stays on the device (its ``T > 0`` tests are ``xp.where``). ``Gradient`` is not provided.
"""

from __future__ import annotations

from ..errors import NodeError
from ..registry import op

TRAINING = "ai.onnx.preview.training"


def _groups(inputs, n_groups: int, op_type: str):
    if not inputs or len(inputs) % n_groups:
        raise NodeError(f"{op_type} expects {n_groups} groups of equally many tensors after R and T, "
                        f"got {len(inputs)} tensors")
    k = len(inputs) // n_groups
    return [inputs[i * k:(i + 1) * k] for i in range(n_groups)]


@op("Adagrad", domain=TRAINING, since=1)
def Adagrad(xp, R, T, *inputs, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    Xs, Gs, Hs = _groups(inputs, 3, "Adagrad")
    X_new, H_new = [], []
    for X, G, H in zip(Xs, Gs, Hs):
        r = (R / (1 + T * decay_factor)).astype(X.dtype)
        g = norm_coefficient * X + G
        h = H + g * g
        X_new.append(X - r * g / (xp.sqrt(h) + epsilon))
        H_new.append(h)
    return tuple(X_new + H_new)


@op("Adam", domain=TRAINING, since=1)
def Adam(xp, R, T, *inputs, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0,
         norm_coefficient_post=0.0):
    Xs, Gs, Vs, Hs = _groups(inputs, 4, "Adam")
    X_new, V_new, H_new = [], [], []
    for X, G, V, H in zip(Xs, Gs, Vs, Hs):
        g = norm_coefficient * X + G
        v = alpha * V + (1 - alpha) * g
        h = beta * H + (1 - beta) * g * g
        t = T.astype(X.dtype)
        r = xp.where(T > 0, R * xp.sqrt(1 - beta ** t) / (1 - alpha ** t), R).astype(X.dtype)
        x = X - r * v / (xp.sqrt(h) + epsilon)
        X_new.append((1 - norm_coefficient_post) * x)
        V_new.append(v)
        H_new.append(h)
    return tuple(X_new + V_new + H_new)


@op("Momentum", domain=TRAINING, since=1)
def Momentum(xp, R, T, *inputs, alpha=None, beta=None, mode=None, norm_coefficient=None):
    if alpha is None or beta is None or mode is None or norm_coefficient is None:
        raise NodeError("Momentum requires the attributes alpha, beta, mode and norm_coefficient")
    if mode not in ("standard", "nesterov"):
        raise NodeError(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
    Xs, Gs, Vs = _groups(inputs, 3, "Momentum")
    X_new, V_new = [], []
    for X, G, V in zip(Xs, Gs, Vs):
        g = norm_coefficient * X + G
        b = xp.where(T > 0, beta, 1.0).astype(X.dtype)  # the first update uses beta = 1
        v = alpha * V + b * g
        step = v if mode == "standard" else g + alpha * v
        X_new.append(X - R.astype(X.dtype) * step)
        V_new.append(v)
    return tuple(X_new + V_new)
