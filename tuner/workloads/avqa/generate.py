"""Answer generation: greedy, sampling and beam search, with or without a KV cache.

Contract of :func:`generate`
----------------------------
* Prompts are left-padded into one batch; positions count real tokens only,
  so a prompt's logits do not depend on the padding of its batch-mates.
* Only answer characters and ``<eos>`` can be generated (``<pad>``, ``<bos>``
  and ``<sep>`` are masked out). A row stops at ``<eos>`` or after
  ``max_new_tokens`` new tokens; the ``<eos>`` counts as a new token.
* ``use_cache=True`` prefills the prompt once, keeps each layer's
  self-attention keys/values (:class:`KVCache`) and the media cross-attention
  keys/values, and feeds one token per step. ``use_cache=False`` re-runs the
  whole prefix, recomputing the media keys/values too, at every step. Both
  compute the same function (answers agree up to float rounding).
* Greedy takes the arg-max. Sampling (``do_sample``) draws from
  ``softmax(logits / temperature)`` with row ``i``'s own ``generators[i]``, so a
  request's answer does not depend on its batch-mates. Beam search keeps
  ``num_beams`` hypotheses per row, scores them by summed log probability /
  length (``<eos>`` counted), admits an ``<eos>`` only from the top
  ``num_beams`` candidates of a step, stops a row when it holds ``num_beams``
  finished hypotheses and its best running beam, even if it ended at the next
  step, would score below all of them (the Hugging Face heuristic), and at the
  limit lets the unfinished beams compete with the finished ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tuner.workloads.avqa.model import BOS, EOS, PAD, SEP, AVQAModel, KVCache


@dataclass(frozen=True)
class DecodingSettings:
    """How answers are decoded (see module docs)."""

    max_new_tokens: int = 16
    num_beams: int = 1
    do_sample: bool = False
    temperature: float = 1.0
    use_cache: bool = True


@dataclass
class Generation:
    """Per row: the new tokens (with ``<eos>`` when emitted) and whether the limit was hit.

    ``decode_calls`` counts decoder forward passes; ``decoded_tokens`` the token
    positions they processed (prefill and re-computation included).
    """

    tokens: list[list[int]]
    hit_limit: list[bool]
    decode_calls: int
    decoded_tokens: int


class _Decoder:
    """Feeds one step at a time to the model, cached or recomputing the prefix."""

    def __init__(
        self,
        model: AVQAModel,
        memory: torch.Tensor,
        prompts: list[list[int]],
        use_cache: bool,
        mark: Callable[[str], None] | None = None,
    ) -> None:
        self.model, self.memory, self.use_cache = model, memory, use_cache
        self.mark: Callable[[str], None] = mark or (lambda name: None)
        length = max(len(p) for p in prompts)
        self.tokens = torch.full((len(prompts), length), PAD, dtype=torch.long, device=memory.device)
        self.mask = torch.zeros((len(prompts), length), dtype=torch.bool, device=memory.device)
        for row, prompt in enumerate(prompts):
            self.tokens[row, length - len(prompt) :] = torch.tensor(prompt, device=memory.device)
            self.mask[row, length - len(prompt) :] = True
        self.positions = (self.mask.long().cumsum(1) - 1).clamp(min=0)
        self.cross = model.cross_keys_values(memory) if use_cache else None
        self.cache = KVCache() if use_cache else None
        self.calls = self.processed = 0

    def first_logits(self) -> torch.Tensor:
        logits = self._run(self.tokens, self.positions, self.mask)
        self.mark("prefill")
        return logits

    def next_logits(self, token: torch.Tensor) -> torch.Tensor:
        """Append ``token`` (N,) to every row and return the logits after it (N, vocab)."""
        position = self.positions[:, -1:] + 1
        ones = torch.ones_like(token[:, None], dtype=torch.bool)
        self.tokens = torch.cat([self.tokens, token[:, None]], dim=1)
        self.positions = torch.cat([self.positions, position], dim=1)
        self.mask = torch.cat([self.mask, ones], dim=1)
        if self.use_cache:
            logits = self._run(token[:, None], position, ones)
        else:
            logits = self._run(self.tokens, self.positions, self.mask)
        self.mark("token")
        return logits

    def reorder(self, rows: torch.Tensor) -> None:
        self.tokens, self.positions, self.mask = self.tokens[rows], self.positions[rows], self.mask[rows]
        if self.cache is not None:
            self.cache.reorder(rows)

    def _run(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        cross = self.cross if self.cross is not None else self.model.cross_keys_values(self.memory)
        self.calls += 1
        self.processed += tokens.numel()
        logits = self.model.decode(tokens, positions, mask, cross, self.cache)[:, -1].float()
        logits[:, [PAD, BOS, SEP]] = float("-inf")
        return logits


def generate(
    model: AVQAModel,
    memory: torch.Tensor,
    prompts: list[list[int]],
    settings: DecodingSettings,
    generators: list[torch.Generator] | None = None,
    mark: Callable[[str], None] | None = None,
) -> Generation:
    """Answer tokens for each prompt (row ``i`` attends to ``memory[i]``); see module docs. ``mark(name)`` (a
    :class:`~tuner.evaluators.runtime.structure.Timeline`'s) is called with ``prefill`` once the prompt's logits
    are queued and ``token`` after each further decoding step's."""
    if settings.max_new_tokens < 1:
        raise ValueError("max_new_tokens must be >= 1")
    if settings.num_beams > 1:
        if settings.do_sample:
            raise ValueError("beam search with sampling is not supported")
        return _beam_search(model, memory, prompts, settings, mark)
    if settings.do_sample and (generators is None or len(generators) != len(prompts)):
        raise ValueError("sampling needs one torch.Generator per prompt")
    decoder = _Decoder(model, memory, prompts, settings.use_cache, mark)
    logits = decoder.first_logits()
    rows = len(prompts)
    answers: list[list[int]] = [[] for _ in range(rows)]
    finished = [False] * rows
    for step in range(settings.max_new_tokens):
        if settings.do_sample:
            assert generators is not None
            probabilities = torch.softmax(logits / settings.temperature, dim=-1)
            # CPU generators (one per request): draw on the CPU, so CUDA runs sample the same way
            token = torch.stack(
                [torch.multinomial(probabilities[i].cpu(), 1, generator=generators[i])[0] for i in range(rows)]
            ).to(logits.device)
        else:
            token = logits.argmax(dim=-1)
        for row in range(rows):
            if not finished[row]:
                answers[row].append(int(token[row]))
                finished[row] = int(token[row]) == EOS
        if all(finished) or step == settings.max_new_tokens - 1:
            break
        logits = decoder.next_logits(token)
    hit = [len(a) >= settings.max_new_tokens and a[-1] != EOS for a in answers]
    return Generation(answers, hit, decoder.calls, decoder.processed)


def _beam_search(
    model: AVQAModel,
    memory: torch.Tensor,
    prompts: list[list[int]],
    settings: DecodingSettings,
    mark: Callable[[str], None] | None = None,
) -> Generation:
    beams, rows = settings.num_beams, len(prompts)
    expanded = [p for p in prompts for _ in range(beams)]
    decoder = _Decoder(model, memory.repeat_interleave(beams, dim=0), expanded, settings.use_cache, mark)
    logits = decoder.first_logits()
    scores = torch.full((rows, beams), float("-inf"), device=memory.device)
    scores[:, 0] = 0.0  # all beams start identical: expand only the first
    running: list[list[list[int]]] = [[[] for _ in range(beams)] for _ in range(rows)]
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(rows)]
    done = [False] * rows
    vocab = logits.shape[-1]
    for step in range(settings.max_new_tokens):
        total = (scores.view(-1, 1) + torch.log_softmax(logits, dim=-1)).view(rows, beams * vocab)
        top_scores, top_ids = total.topk(2 * beams, dim=-1)
        next_rows, next_tokens, next_scores = [], [], []
        next_running: list[list[list[int]]] = []
        for row in range(rows):
            kept: list[list[int]] = []
            for rank, (score, candidate) in enumerate(zip(top_scores[row].tolist(), top_ids[row].tolist())):
                if done[row] or len(kept) == beams:
                    break
                beam, token = divmod(candidate, vocab)
                sequence = running[row][beam] + [token]
                if token == EOS:
                    if rank < beams:  # an <eos> below the top num_beams candidates is not a hypothesis
                        finished[row] = sorted(
                            finished[row] + [(score / len(sequence), sequence)], key=lambda item: -item[0]
                        )[:beams]
                    continue
                kept.append(sequence)
                next_rows.append(row * beams + beam)
                next_tokens.append(token)
                next_scores.append(score)
            if kept and len(finished[row]) == beams:
                # done once the best running beam, even ending next step, would rank below every kept hypothesis
                best_running = max(next_scores[-len(kept) :]) / (len(kept[0]) + 1)
                done[row] = done[row] or best_running <= finished[row][-1][0]
            if not kept:
                done[row] = True
            while len(kept) < beams:  # finished rows keep dummy beams that can never win
                kept.append(running[row][0] + [PAD])
                next_rows.append(row * beams)
                next_tokens.append(PAD)
                next_scores.append(float("-inf"))
            next_running.append(kept)
        running = next_running
        scores = torch.tensor(next_scores, device=memory.device).view(rows, beams)
        if all(done) or step == settings.max_new_tokens - 1:
            break
        decoder.reorder(torch.tensor(next_rows, device=memory.device))
        logits = decoder.next_logits(torch.tensor(next_tokens, device=memory.device))
    answers, hit = [], []
    for row in range(rows):
        candidates = list(finished[row])
        if not done[row]:  # the limit stopped this row: unfinished beams compete too
            candidates += [
                (float(scores[row, b]) / len(running[row][b]), running[row][b])
                for b in range(beams)
                if scores[row, b] > float("-inf")
            ]
        best = max(candidates, key=lambda item: item[0])[1] if candidates else running[row][0]
        answers.append(best)
        hit.append(best[-1] != EOS)
    return Generation(answers, hit, decoder.calls, decoder.processed)
