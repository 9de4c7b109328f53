"""Elementwise math, logic and comparison ops (numpy-style broadcasting, opset 7+)."""

from ..registry import op


@op("Add", since=7)
def Add(xp, A, B):
    return xp.add(A, B)


@op("Abs", since=6)
def Abs(xp, X):
    return xp.abs(X)


@op("Relu", since=6)
def Relu(xp, X):
    return xp.where(X > 0, X, xp.zeros_like(X))
