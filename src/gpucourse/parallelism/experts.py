"""Mixture of experts: a top-k router with a capacity factor.

Each token picks its k most likely experts; an expert takes at most its
capacity, and the tokens over it are dropped. The module routes synthetic
logits, counts the tokens each expert receives and drops, sweeps the capacity
factor, and computes Switch Transformers' load-balancing loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpucourse.checks import (count as _count, finite_array as _array, real as _real,
                              whole_seed as _whole_seed)


# -----------------------------------------------------------------------------
# Mixture of experts: the top-k router
#
# A mixture-of-experts layer replaces one MLP by `experts` MLPs and a router:
# a linear layer that gives each token a logit per expert. Softmax turns the
# logits into probabilities; each token goes to its k most probable experts
# (k = 1 in Switch Transformers, k = 2 in GShard, which sends a token to its
# second expert only at random; see route_tokens). Each expert accepts at
# most `capacity` tokens per batch, so that every expert's work has a fixed
# size; tokens beyond it are dropped (they skip the layer through the
# residual connection).


def expert_capacity(tokens, experts, k=1, capacity_factor=1.0) -> int:
    """Tokens one expert accepts: ceil(capacity_factor * k * tokens / experts).

    With a factor of 1 and a perfectly even router every expert is exactly
    full; a factor above 1 leaves room for imbalance (Fedus et al. 2022;
    GShard's top-2 uses 2 * tokens / experts, i.e. k = 2).
    """
    tokens, experts = _count("tokens", tokens), _count("experts", experts)
    k = _count("k", k)
    if k > experts:
        raise ValueError(f"k must be at most the number of experts ({experts}), got k={k}")
    factor = _real("capacity_factor", capacity_factor)
    if factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor!r}")
    # Round the product before ceil so that 1.25 * 64 is 80, not 81 by round-off.
    return max(1, math.ceil(round(factor * k * tokens / experts, 9)))


def softmax(logits):
    """Softmax over the last axis, stable for large logits."""
    z = _array("logits", logits, min_ndim=1)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def load_balancing_loss(router_probs, alpha=1.0) -> float:
    """Switch Transformers' auxiliary loss, alpha * N * sum_i f_i * P_i.

    router_probs: (tokens, experts), each row a probability distribution.
    f_i is the fraction of tokens whose most probable expert is i, and P_i
    the mean probability the router gives expert i (Fedus et al. 2022, eq. 4).
    It is 1 (times alpha) for a router that spreads every token evenly, and
    N when every token goes to one expert with certainty.
    """
    probs = _array("router_probs", router_probs, ndim=2)
    if np.any(probs < 0) or not np.allclose(probs.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("router_probs must hold probabilities: rows of numbers >= 0 summing to 1")
    alpha = _real("alpha", alpha)
    tokens, experts = probs.shape
    if tokens == 0:
        raise ValueError("router_probs must hold at least one token")
    f = np.bincount(probs.argmax(axis=1), minlength=experts) / tokens
    p = probs.mean(axis=0)
    return float(alpha * experts * np.sum(f * p))


@dataclass
class Routing:
    """The outcome of routing a batch of tokens.

    expert_index: (tokens, k) the expert each token's j-th choice went to,
        or -1 where it was dropped for lack of capacity or not sampled;
    choices: (tokens, k) the experts chosen before capacity was applied;
    gates: (tokens, k) the weight of each expert's output (0 where dropped);
    tokens_per_expert: (experts,) tokens each expert accepted;
    not_sampled: (tokens, k) True where GShard's random second-expert choice
        left a choice out (never with second_expert="always"); such a choice
        takes no place and is not counted as dropped.
    """

    probs: np.ndarray
    k: int
    capacity: int
    choices: np.ndarray
    expert_index: np.ndarray
    gates: np.ndarray
    tokens_per_expert: np.ndarray
    not_sampled: np.ndarray | None = None

    def __post_init__(self):
        if self.not_sampled is None:
            self.not_sampled = np.zeros(self.choices.shape, dtype=bool)

    @property
    def experts(self) -> int:
        return self.probs.shape[1]

    @property
    def tokens(self) -> int:
        return self.probs.shape[0]

    @property
    def routed(self) -> int:
        """Token-to-expert assignments that were kept."""
        return int(np.sum(self.expert_index >= 0))

    @property
    def dropped(self) -> int:
        """Assignments dropped because the chosen expert was full."""
        return int(np.sum((self.expert_index < 0) & ~self.not_sampled))

    @property
    def skipped(self) -> int:
        """Second choices that GShard's random dispatch left out."""
        return int(np.sum(self.not_sampled))

    @property
    def dropped_fraction(self) -> float:
        return self.dropped / (self.tokens * self.k)

    @property
    def load_balancing_loss(self) -> float:
        return load_balancing_loss(self.probs)


SECOND_EXPERT_POLICIES = ("always", "random")


def route_tokens(router_logits, k=1, capacity_factor=1.25, second_expert="always", seed=0) -> Routing:
    """Route tokens to their top-k experts, each expert taking at most
    `expert_capacity(tokens, experts, k, capacity_factor)` of them.

    Tokens claim places in order, all first choices before any second choice
    (as in GShard), so a token's second choice is dropped before anyone's
    first. With k = 1 the gate is the chosen expert's probability (Switch);
    with k > 1 the k probabilities are renormalised to sum to 1 (GShard).

    second_expert says which second choices are dispatched at all:
    "always" (the default, a simplification of GShard: every token tries its
    second expert) or "random" (GShard's Algorithm 1, k = 2 only: the second
    expert gets the token only if a uniform draw falls below 2 * g2, where g2
    is its renormalised gate, so a weak second choice is often skipped and
    saves the expert's capacity; a skipped choice takes no place). `seed`
    fixes the draws.
    """
    probs = softmax(router_logits)
    if probs.ndim != 2 or probs.shape[0] == 0:
        raise ValueError(f"router_logits must have shape (tokens, experts) with at least one "
                         f"token, got shape {probs.shape}")
    tokens, experts = probs.shape
    k = _count("k", k)
    if second_expert not in SECOND_EXPERT_POLICIES:
        raise ValueError(f"second_expert must be one of {', '.join(SECOND_EXPERT_POLICIES)}, "
                         f"got {second_expert!r}")
    if second_expert == "random" and k != 2:
        raise ValueError(f"second_expert='random' is GShard's top-2 rule and needs k=2, got k={k}")
    capacity = expert_capacity(tokens, experts, k, capacity_factor)
    # Most probable first; a stable sort breaks ties towards the lower expert number.
    choices = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    gates = np.take_along_axis(probs, choices, axis=1)
    if k > 1:
        gates = gates / gates.sum(axis=1, keepdims=True)
    not_sampled = np.zeros((tokens, k), dtype=bool)
    if second_expert == "random":
        draws = np.random.default_rng(_whole_seed(seed)).uniform(size=tokens)
        not_sampled[:, 1] = ~(2 * gates[:, 1] > draws)
    expert_index = np.full((tokens, k), -1)
    load = np.zeros(experts, dtype=int)
    for j in range(k):
        for t in range(tokens):
            e = choices[t, j]
            if not not_sampled[t, j] and load[e] < capacity:
                load[e] += 1
                expert_index[t, j] = e
    gates = np.where(expert_index >= 0, gates, 0.0)
    return Routing(probs, k, capacity, choices, expert_index, gates, load, not_sampled)


def synthetic_router_logits(tokens, experts, skew=1.0, seed=0):
    """Router logits for a demonstration: Gaussian noise plus a preference
    that falls linearly from `skew` (expert 0) to 0 (the last expert), so
    that a larger skew makes the first experts more popular."""
    tokens, experts = _count("tokens", tokens), _count("experts", experts)
    skew = _real("skew", skew)
    rng = np.random.default_rng(_whole_seed(seed))
    preference = skew * np.linspace(1, 0, experts)
    return rng.normal(size=(tokens, experts)) + preference


def dropped_fractions(router_logits, capacity_factors, k=1):
    """The fraction of assignments dropped at each capacity factor."""
    factors = _array("capacity_factors", capacity_factors, ndim=1)
    return np.array([route_tokens(router_logits, k, c).dropped_fraction for c in factors])
