"""The MDF standard functions (spec v0.2, as modeci-mdf defines them) and the ACT-R functions.

The numeric standard functions are expressions over their arguments, compiled like any other MDF
expression (so they run on the session's device). The ACT-R functions work on host values (chunks
and productions are dicts of strings) and are plain Python; they never mutate their arguments.
``onnx::*`` functions are dispatched by :mod:`gpuops.mdf.onnx_bridge`.
"""

from __future__ import annotations

import random
import re

# name -> (arguments, expression)
STANDARD = {
    "linear": (("variable0", "slope", "intercept"), "(variable0 * slope + intercept)"),
    "logistic": (("variable0", "gain", "bias", "offset"), "1/(1 + exp(-1*gain*(variable0 + bias) + offset))"),
    "exponential": (("variable0", "scale", "rate", "bias", "offset"),
                    "scale * exp((rate * variable0) + bias) + offset"),
    "sin": (("variable0", "scale"), "scale * sin(variable0)"),
    "cos": (("variable0", "scale"), "scale * cos(variable0)"),
    "tan": (("variable0", "scale"), "scale * tan(variable0)"),
    "sinh": (("variable0", "scale"), "scale * sinh(variable0)"),
    "cosh": (("variable0", "scale"), "scale * cosh(variable0)"),
    "tanh": (("variable0", "scale"), "scale * tanh(variable0)"),
    "arcsin": (("variable0", "scale"), "scale * arcsin(variable0)"),
    "arccos": (("variable0", "scale"), "scale * arccos(variable0)"),
    "arctan": (("variable0", "scale"), "scale * arctan(variable0)"),
    "MatMul": (("A", "B"), "A @ B"),
    "Relu": (("A",), "A * (A > 0)"),
}


# -- ACT-R ---------------------------------------------------------------------------------------
# Chunks are dicts of slot -> string; a pattern is a buffer dict whose first entry names the buffer.
# Matching is positional over the slot values, as in the ccm library that modeci-mdf uses:
# "word" must equal, "!word" must differ, "?x" binds x (or must equal x once bound), "!?x" must
# differ from x's binding, a lone "?" matches anything.

def _chunk_values(chunk: dict) -> list[str]:
    return " ".join(v for k, v in chunk.items() if k != "name").split()


def _pattern_tokens(pattern: dict) -> list[str]:
    text = " ".join(list(pattern.values())[1:])
    return text.replace("-=", "!?").replace("=", "?").split()


_TOKEN = re.compile(r"(!\?|\?|!)?([\w.-]*)$")


def _match(patterns: dict[str, list[str]], context: dict[str, list[str] | None]) -> dict | None:
    """Bindings when every buffer's slots match its pattern, else None."""
    bound: dict[str, str] = {}
    later = []  # variable (in)equalities, checked once every binding is made (as ccm does)
    for buffer, tokens in patterns.items():
        slots = context.get(buffer)
        if slots is None and any(t != "?" for t in tokens):
            return None
        for i, token in enumerate(tokens):
            if token == "?":
                continue
            if i >= len(slots):
                return None
            m = _TOKEN.match(token)
            if m is None or not m.group(2):
                raise ValueError(f"unknown ACT-R pattern token {token!r}")
            kind, word, slot = m.group(1), m.group(2), slots[i]
            if kind is None and slot != word or kind == "!" and slot == word:
                return None
            if kind == "?":
                if word in bound:
                    later.append((slot, word, True))
                else:
                    bound[word] = slot
            elif kind == "!?":
                later.append((slot, word, False))
    for slot, var, equal in later:
        if var not in bound or (slot == bound[var]) != equal:
            return None
    return bound


def change_goal(pattern: dict, curr_goal: dict) -> dict:
    if curr_goal == 0:
        return {}
    goal = {**curr_goal, **pattern}
    goal.pop("buffer", None)
    return goal


def retrieve_chunk(pattern: dict, dm_chunks: list[dict], types: dict) -> dict:
    if pattern == {}:
        return {}
    memory: list[list[str]] = []
    for chunk in dm_chunks:
        values = _chunk_values(chunk)
        if values not in memory:
            memory.append(values)
    tokens = _pattern_tokens(pattern)
    for values in memory:
        if _match({"dm": tokens}, {"dm": values}) is not None:
            isa = values[0]
            return {"ISA": isa, **{types[isa][i - 1]: values[i] for i in range(1, len(values))}}
    return {}


def pattern_matching_function(productions: list[dict], goal: dict, retrieval: dict) -> list[dict]:
    context = {"goal": _chunk_values(goal), "retrieval": _chunk_values(retrieval) if retrieval != {} else None}
    matched = []
    for p in productions:
        bindings = _match({lhs["buffer"]: _pattern_tokens(lhs) for lhs in p["lhs"]}, context)
        if bindings is not None:
            matched.append({**p, "bindings": bindings})
    return matched


def conflict_resolution_function(productions: list[dict]) -> dict:
    """Picks one matching production at random (no utilities yet, as in the reference)."""
    return random.choice(productions) if productions else {}


def _update_buffer(production: dict, buffer: str) -> dict:
    if len(production) == 0:
        return {}
    pattern = {}
    for p in production["rhs"]:
        if p["buffer"] == buffer:
            pattern = dict(p)
    bindings = production["bindings"]
    return {k: bindings.get(v.replace("=", ""), v) for k, v in pattern.items()}


def update_goal(production: dict) -> dict:
    return _update_buffer(production, "goal")


def update_retrieval(production: dict) -> dict:
    return _update_buffer(production, "retrieval")


def check_termination(production: dict) -> bool:
    return production == {}


ACTR = {f.__name__: f for f in (change_goal, retrieve_chunk, pattern_matching_function,
                                 conflict_resolution_function, update_goal, update_retrieval, check_termination)}
