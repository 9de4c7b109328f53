"""com.microsoft AttnLSTM against onnxruntime's CPU kernel."""

import numpy as np
import pytest

from .helpers import check, ms_node, rand

T, B, I, H = 4, 2, 3, 5
DEPTH, ATTN, MEM, AWS = 6, 4, 5, 3


def _feeds(D, with_aw, lens, mem_lens, extras):
    attn_size = AWS if with_aw else DEPTH
    feeds = {"x": rand(T, B, I), "w": rand(D, 4 * H, I + attn_size, scale=0.4), "r": rand(D, 4 * H, H, scale=0.4)}
    names = ["x", "w", "r"]

    def add(name, value):
        if value is None:
            names.append("")
        else:
            feeds[name] = value
            names.append(name)
    add("b", rand(D, 8 * H, scale=0.2) if "b" in extras else None)
    add("lens", lens)
    add("h0", rand(D, B, H) if "init" in extras else None)
    add("c0", rand(D, B, H) if "init" in extras else None)
    add("p", rand(D, 3 * H, scale=0.3) if "p" in extras else None)
    add("qw", rand(D, H, ATTN, scale=0.5))
    add("mw", rand(D, DEPTH, ATTN, scale=0.5))
    add("v", rand(D, ATTN))
    add("m", rand(B, MEM, DEPTH))
    add("mlens", mem_lens)
    if with_aw:
        add("aw", rand(D, H + DEPTH, AWS, scale=0.4))
    while names and names[-1] == "":
        names.pop()
    return feeds, names


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_aw", [False, True])
def test_attn_lstm(direction, with_aw):
    D = 2 if direction == "bidirectional" else 1
    feeds, names = _feeds(D, with_aw, None, None, {"b"})
    check(ms_node("AttnLSTM", names, ["y", "yh", "yc"], direction=direction, hidden_size=H), feeds,
          rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_attn_lstm_lengths_initial_state_peepholes(direction):
    D = 2 if direction == "bidirectional" else 1
    feeds, names = _feeds(D, True, np.array([4, 2], np.int32), np.array([3, 5], np.int32), {"b", "init", "p"})
    check(ms_node("AttnLSTM", names, ["y", "yh", "yc"], direction=direction, hidden_size=H), feeds,
          rtol=1e-4, atol=1e-5)


def test_attn_lstm_activations_and_clip():
    feeds, names = _feeds(1, False, None, None, {"b"})
    check(ms_node("AttnLSTM", names, ["y", "yh", "yc"], hidden_size=H, clip=0.7,
                  activations=["HardSigmoid", "Tanh", "Softsign"], activation_alpha=[0.3], activation_beta=[0.4]),
          feeds, rtol=1e-4, atol=1e-5)
