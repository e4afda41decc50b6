"""Checks a user can run on real models: does speculation change the target's output?

Greedy check: decode at temperature 0 with the drafter and without it and compare token by
token. At the first divergence, report the target's top-two logit gap there: a gap near zero
(a near-tie, where verifying γ+1 positions in one pass and decoding one token at a time may
round differently, especially in bf16) explains a divergence; a clear gap means a fault.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specchat.config import GenerationConfig
from specchat.events import DoneEvent


@dataclass(frozen=True)
class Divergence:
    """The first position where two greedy outputs differ.

    Attributes:
        index: 0-based index into the generated tokens.
        target_only_token / speculative_token: the two ids there.
        top_tokens: the target's two most likely ids at that position (full-sequence forward).
        top_logits: their logits (float, in the model's dtype's precision).
        gap: top_logits[0] - top_logits[1], >= 0.
    """

    index: int
    target_only_token: int
    speculative_token: int
    top_tokens: tuple[int, int]
    top_logits: tuple[float, float]

    @property
    def gap(self) -> float:
        return self.top_logits[0] - self.top_logits[1]


def greedy_tokens(service, input_ids: list[int], drafter: str, max_new_tokens: int, num_speculative_tokens: int = 4):
    """Greedy token ids from ``service.generate`` (a ChatService)."""
    config = GenerationConfig(max_new_tokens=max_new_tokens, num_speculative_tokens=num_speculative_tokens)
    done = [e for e in service.generate(input_ids, drafter=drafter, config=config) if isinstance(e, DoneEvent)][0]
    return list(done.token_ids)


@torch.inference_mode()
def first_divergence(model, input_ids: list[int], reference: list[int], other: list[int]) -> Divergence | None:
    """Compare two generated id lists; at the first difference, measure the target's top-2 gap.

    Args:
        model: the target model.
        input_ids: the prompt both outputs continue.
        reference: target-only greedy output; other: the speculative output.
    Returns None when one is a prefix of the other (identical over the common length).
    """
    index = next((i for i, (a, b) in enumerate(zip(reference, other)) if a != b), None)
    if index is None:
        return None
    device = next(model.parameters()).device
    prefix = torch.tensor([input_ids + reference[:index]], device=device)
    logits = model(prefix, logits_to_keep=1).logits[0, -1].float()
    top = torch.topk(logits, 2)
    return Divergence(
        index=index,
        target_only_token=reference[index],
        speculative_token=other[index],
        top_tokens=(int(top.indices[0]), int(top.indices[1])),
        top_logits=(float(top.values[0]), float(top.values[1])),
    )
