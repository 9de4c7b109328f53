"""com.microsoft text generation: BeamSearch, GreedySearch and Sampling, the ops that
``onnxruntime.transformers.convert_generation`` wraps around a decoder.

The node runs its ``decoder`` graph attribute (a :class:`gpuops.onnx.session.Subgraph`) once per
generated token. ``model_type`` 0 is a GPT-2 style decoder with the signature
``(input_ids, position_ids, attention_mask, past_0..past_{L-1}) -> (logits, present_0..present_{L-1})``,
past / present shaped ``(2, batch * beams, heads, length, head_size)``; an optional ``init_decoder``
with the same signature runs the first step. ``model_type`` 1 is a T5 style encoder-decoder for
BeamSearch (and GreedySearch, which onnxruntime runs for GPT-2 only): the ``decoder`` graph
``(input_ids, encoder_attention_mask[, encoder_hidden_states], past_key_self_*, past_value_self_*,
past_key_cross_*, past_value_cross_*) -> (logits, present_key_self_*, present_value_self_*)``, and
the ``encoder`` graph in either of convert_generation's formats: ``(encoder_input_ids,
encoder_attention_mask) -> (present_key_cross_*, present_value_cross_*)``, the decoder then taking
the first step from empty self-attention pasts, or the older ``(encoder_input_ids,
encoder_attention_mask, decoder_input_ids) -> (logits, encoder_hidden_states, present_key_self_*,
present_value_self_*, present_key_cross_*, present_value_cross_*)`` that takes it itself. Generation
starts from ``decoder_start_token_id``; an ``encoder_attention_mask`` not given masks the left padding.

The semantics follow onnxruntime's CPU kernels:

* prompt: a token equal to ``pad_token_id`` gets attention mask 0 (unless ``attention_mask`` is
  given) and position 0; the other tokens count their positions from 0. Each step feeds the new token
  with the next position and appends 1 to the mask.
* scores are processed in this order: repetition penalty (a score of a token already in the
  sequence is multiplied by the penalty when negative, divided when not), ``no_repeat_ngram_size``,
  ``vocab_mask``, ``prefix_vocab_mask`` (first step only), ``min_length`` (EOS is barred while the
  sequence, prompt included, is shorter), temperature (Sampling). The beam search processes
  log-softmax scores, greedy search and sampling the raw logits.
* greedy / sampling: once a sequence produced ``eos_token_id`` it is continued with
  ``pad_token_id`` (the EOS itself is written as the pad token); when every sequence has ended the
  search stops and the rest of ``sequences`` is 0.
* beam search: the first beam of each batch entry starts with score 0, the others with -1e9; each
  step keeps the ``2 * num_beams`` best (beam, token) pairs; an EOS among the first ``num_beams`` of
  them closes a hypothesis scored ``sum_logprobs / length ** length_penalty`` (length without the
  EOS); a batch entry is done when it holds ``num_beams`` hypotheses and (with ``early_stopping``)
  at once, or when the best running score can no longer beat its worst hypothesis. onnxruntime
  takes that best running score from the candidate slice at ``batch * num_beams`` (not
  ``batch * 2 * num_beams``); this implementation does the same so that the results agree.
  ``sequences`` is padded with ``pad_token_id``; ``scores`` holds each step's scores after the
  beam scores were added.
* sampling: (``custom=0``) tokens whose ascending cumulative probability is at most ``1 - top_p``
  are set to ``filter_value``, except the ``min_tokens_to_keep`` most likely; (``custom=1``) the
  tokens after the descending cumulative probability first exceeds ``top_p``; then one token is
  drawn from the softmax of the filtered scores. The uniform draws replay onnxruntime's generator on
  its Linux builds (libstdc++'s ``default_random_engine`` seeded with the ``seed`` input, 0 when
  absent), so the sequences match onnxruntime's there; its Windows builds (MSVC's engine is a
  Mersenne twister) draw other numbers. The optional ``filtered_logits`` output is the last step's
  filtered scores. ``presence_mask`` subtracts ``presence_penalty`` from the scores of the masked
  tokens (onnxruntime's CPU kernel applies it to the first score only, a defect not reproduced).

The scores stay on the device; each step reads the chosen tokens (and, for the beam search, the
``2 * num_beams`` candidates per batch entry) on the host to update the sequences and to decide
whether to stop: the ops declare those host syncs.

One module, past 500 lines: the three searches share one decoding loop (prompt, pasts, score
processing, beam bookkeeping), whose state would otherwise be split across files.
"""

from __future__ import annotations

import bisect

import numpy as np

from ...device import to_host
from ...dtypes import np_dtype
from ...errors import NodeError
from ...registry import op
from ..reduce import topk

MS = "com.microsoft"
LOWEST = np.finfo(np.float32).min  # std::numeric_limits<float>::lowest(), onnxruntime's "banned" score
SYNCS = "reads the chosen tokens every step to extend the sequences and to stop at EOS"


# -- parameters ------------------------------------------------------------------------------------

def _scalar(value, default, what: str, cast=int):
    """A scalar input (host array, shape [] or [1]) as a Python value, or ``default`` when omitted."""
    if value is None:
        return default
    value = np.asarray(value)
    if value.size != 1:
        raise NodeError(f"{what} must hold a single value, got shape {list(value.shape)}")
    return cast(value.reshape(()).item())


class _Params:
    """The generation parameters of one run, validated."""

    def __init__(self, input_ids, max_length, min_length, repetition_penalty, *, eos_token_id, pad_token_id,
                 model_type, no_repeat_ngram_size, vocab_size, limit):
        if eos_token_id is None or pad_token_id is None:
            raise NodeError("the eos_token_id and pad_token_id attributes are required")
        if eos_token_id < 0 or pad_token_id < 0:
            raise NodeError(f"eos_token_id ({eos_token_id}) and pad_token_id ({pad_token_id}) must be >= 0")
        if model_type not in (0, 1):
            raise NodeError(f"model_type {model_type} is not supported (0: GPT-2 style decoder, 1: T5 style "
                            "encoder-decoder)")
        if input_ids.ndim != 2 or 0 in input_ids.shape:
            raise NodeError(f"input_ids must have shape [batch_size, sequence_length] (not empty), got "
                            f"{list(input_ids.shape)}")
        self.eos, self.pad, self.model_type = int(eos_token_id), int(pad_token_id), int(model_type)
        self.batch = int(input_ids.shape[0])
        self.prompt_length = int(input_ids.shape[1]) if model_type == 0 else 1
        self.max_length = _scalar(max_length, limit, "max_length")
        if not self.prompt_length < self.max_length <= limit:
            raise NodeError(f"max_length ({self.max_length}) must be greater than the input sequence length "
                            f"({self.prompt_length}) and at most {limit}")
        self.min_length = _scalar(min_length, 0, "min_length")
        self.repetition_penalty = _scalar(repetition_penalty, 1.0, "repetition_penalty", float)
        if not self.repetition_penalty > 0:
            raise NodeError(f"repetition_penalty must be greater than 0, got {self.repetition_penalty}")
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        self.vocab_size = int(vocab_size)
        self.num_beams = 1
        self.temperature = 1.0


def _check_mask(mask, shape, what: str):
    if mask is not None and tuple(mask.shape) != tuple(shape):
        raise NodeError(f"{what} must have shape {list(shape)}, got {list(mask.shape)}")


# -- logits processors -----------------------------------------------------------------------------

class _Processors:
    """onnxruntime's logits processors, in its order, on device scores of shape [batch * beams, vocab]."""

    def __init__(self, xp, p: _Params, vocab_mask, prefix_vocab_mask, presence_mask=None, presence_penalty=0.0):
        self.xp, self.p = xp, p
        self.vocab_mask, self.prefix_vocab_mask = vocab_mask, prefix_vocab_mask
        self.presence_mask, self.presence_penalty = presence_mask, float(presence_penalty)

    def __call__(self, scores, sequences: np.ndarray, step: int):
        """``sequences``: the host token ids so far, [batch * beams, current length]; ``step`` counts from 1."""
        xp, p = self.xp, self.p
        rows, vocab = scores.shape
        for mask, what in ((self.vocab_mask, "vocab_mask"), (self.prefix_vocab_mask, "prefix_vocab_mask"),
                           (self.presence_mask, "presence_mask")):
            if mask is not None and mask.shape[-1] != vocab:
                raise NodeError(f"{what} must have the decoder's vocabulary size {vocab} as last dimension, got "
                                f"{list(mask.shape)}")
        lowest = xp.asarray(LOWEST, dtype=scores.dtype)
        if p.repetition_penalty != 1.0:
            seen = np.zeros((rows, vocab), dtype=bool)
            seen[np.arange(rows)[:, None], sequences] = True
            penalty = np.float32(p.repetition_penalty)
            penalized = xp.where(scores < 0, scores * penalty, scores / penalty)
            scores = xp.where(xp.asarray(seen), penalized, scores)
        n = p.no_repeat_ngram_size
        if n > 0 and n <= sequences.shape[1]:
            scores = xp.where(xp.asarray(_ngram_bans(sequences, n, vocab)), lowest, scores)
        if self.vocab_mask is not None:
            scores = xp.where(self.vocab_mask[None, :] == 0, lowest, scores)
        if self.prefix_vocab_mask is not None and step == 1:
            prefix = self.prefix_vocab_mask
            if p.num_beams > 1:
                prefix = xp.repeat(prefix, p.num_beams, axis=0)
            scores = xp.where(prefix == 0, lowest, scores)
        if p.min_length > 0 and sequences.shape[1] < p.min_length:
            scores = xp.where(xp.arange(vocab) == p.eos, lowest, scores)
        if p.temperature > 0 and p.temperature != 1.0:
            scores = scores / np.float32(p.temperature)
        if self.presence_mask is not None and self.presence_penalty != 0.0:
            scores = scores - self.presence_mask.astype(scores.dtype) * np.float32(self.presence_penalty)
        return scores


def _ngram_bans(sequences: np.ndarray, n: int, vocab: int) -> np.ndarray:
    """[rows, vocab]: the tokens that would repeat an n-gram already in each sequence."""
    rows, length = sequences.shape
    banned = np.zeros((rows, vocab), dtype=bool)
    for r in range(rows):
        seq = sequences[r]
        prefix = seq[length - n + 1:] if n > 1 else seq[:0]
        for j in range(length - n + 1):
            if n == 1 or np.array_equal(seq[j:j + n - 1], prefix):
                banned[r, seq[j + n - 1]] = True
    return banned


def _log_softmax(xp, x):
    shifted = x - xp.max(x, axis=-1, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=-1, keepdims=True))


# -- decoders --------------------------------------------------------------------------------------

def _declared(graph, index: int, what: str):
    """The element type and dims (int or None) a subgraph declares for input ``index``."""
    vi = graph.plan.inputs[index]
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        raise NodeError(f"{what} must be a tensor")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim] if tt.HasField("shape") else None
    return (np_dtype(tt.elem_type) if tt.elem_type else None), dims


def _expect_names(graph, names: list[str], outputs: bool, what: str):
    have = graph.output_names if outputs else graph.input_names
    kind = "outputs" if outputs else "inputs"
    if have[:len(names)] != names:
        raise NodeError(f"the {what} graph's {kind} must start with {names}, got {have[:len(names)]}")


class _GptDecoder:
    """Runs a GPT-2 style decoder: the prompt first, then one token per step, with its past state."""

    def __init__(self, xp, decoder, init_decoder, ids: np.ndarray, attention_mask, p: _Params, beams: int):
        self.xp, self.beams = xp, beams
        for graph, what in ((decoder, "decoder"), (init_decoder, "init_decoder")):
            if graph is None:
                continue
            _expect_names(graph, ["input_ids", "position_ids", "attention_mask", "past_0"], False, what)
            _expect_names(graph, ["logits", "present_0"], True, what)
            n_in, n_out = len(graph.input_names), len(graph.output_names)
            if n_in != n_out + 2:
                raise NodeError(f"the {what} graph has {n_in} inputs and {n_out} outputs; a GPT-2 style decoder "
                                "takes input_ids, position_ids, attention_mask and one past per present output "
                                "(past/present buffer sharing is not supported)")
        self.decoder, self.first = decoder, init_decoder or decoder
        self.layers = len(decoder.output_names) - 1
        self.int_types = [(_declared(decoder, i, "decoder input")[0] or np.dtype(np.int32)) for i in range(3)]
        past_dtype, dims = _declared(decoder, 3, "decoder input past_0")
        if dims is None or len(dims) != 5 or dims[2] is None or dims[4] is None:
            raise NodeError(f"the decoder's past_0 must be declared with shape [2, batch, heads, past_length, "
                            f"head_size] and known heads / head_size, got {dims}")
        batch, length = ids.shape
        real = ids != p.pad
        if attention_mask is None:
            mask = xp.asarray(real.astype(np.int32))
        else:
            mask = attention_mask
        positions = np.where(real, np.cumsum(real, axis=1) - 1, 0)
        self.next_position = np.repeat(real.sum(axis=1), beams)[:, None]
        rep = (lambda a: xp.repeat(a, beams, axis=0)) if beams > 1 else (lambda a: a)
        self.mask = rep(xp.asarray(mask).astype(self.int_types[2]))
        empty = xp.zeros((2, batch * beams, dims[2], 0, dims[4]), dtype=past_dtype or np.float32)
        self.feeds = [rep(xp.asarray(ids.astype(self.int_types[0]))),
                      rep(xp.asarray(positions.astype(self.int_types[1]))), self.mask] + [empty] * self.layers
        self.graph = self.first

    def run(self):
        """Logits of the last fed position, [batch * beams, vocab]."""
        outs = self.graph(*self.feeds)
        self.graph = self.decoder
        self.presents = outs[1:]
        logits = outs[0]
        if logits.ndim != 3 or logits.shape[0] != self.feeds[0].shape[0]:
            raise NodeError(f"the decoder's logits must have shape [batch * beams, sequence, vocab], got "
                            f"{list(logits.shape)}")
        return logits[:, -1, :]

    def advance(self, tokens: np.ndarray, beam_indices: np.ndarray | None):
        xp = self.xp
        rows = tokens.shape[0]
        self.feeds[0] = xp.asarray(tokens.reshape(rows, 1).astype(self.int_types[0]))
        self.feeds[1] = xp.asarray(self.next_position.astype(self.int_types[1]))
        self.next_position = self.next_position + 1
        self.mask = xp.concat([self.mask, xp.ones((rows, 1), dtype=self.mask.dtype)], axis=1)
        self.feeds[2] = self.mask
        pasts = self.presents
        if beam_indices is not None:
            index = xp.asarray(beam_indices.astype(np.int64))
            pasts = [xp.take(t, index, axis=1) for t in pasts]
        self.feeds[3:] = pasts


class _T5Decoder:
    """Runs a T5 style encoder-decoder: the encoder (with the first decoder step) once, then the decoder."""

    def __init__(self, xp, encoder, decoder, ids: np.ndarray, attention_mask, p: _Params, start: int, beams: int):
        if encoder is None:
            raise NodeError("model_type 1 (encoder-decoder) requires the 'encoder' graph attribute")
        if start < 0:
            raise NodeError("model_type 1 (encoder-decoder) requires the decoder_start_token_id attribute")
        _expect_names(encoder, ["encoder_input_ids", "encoder_attention_mask"], False, "encoder")
        _expect_names(decoder, ["input_ids", "encoder_attention_mask"], False, "decoder")
        _expect_names(decoder, ["logits"], True, "decoder")
        self.xp, self.encoder, self.decoder, self.beams = xp, encoder, decoder, beams
        self.new_format = len(encoder.input_names) == 2  # the encoder outputs only the cross attention state
        if not self.new_format:
            _expect_names(encoder, ["encoder_input_ids", "encoder_attention_mask", "decoder_input_ids"], False,
                          "encoder")
            _expect_names(encoder, ["logits", "encoder_hidden_states"], True, "encoder")
        self.with_hidden = len(decoder.input_names) > 2 and decoder.input_names[2] == "encoder_hidden_states"
        self.self_states = len(decoder.output_names) - 1
        first_past = 3 if self.with_hidden else 2
        if len(decoder.input_names) - first_past != 2 * self.self_states:
            raise NodeError(f"the decoder takes {len(decoder.input_names)} inputs; with {self.self_states} self "
                            f"attention presents it needs {first_past} + {2 * self.self_states} (self and cross "
                            "attention pasts)")
        batch, _ = ids.shape
        if attention_mask is None:
            # only left padding is masked: a trailing EOS equal to the pad token stays visible
            mask = (np.cumsum(ids != p.pad, axis=1) > 0).astype(np.int32)
            mask = xp.asarray(mask)
        else:
            mask = attention_mask
        self.int_type = _declared(encoder, 0, "encoder input")[0] or np.dtype(np.int32)
        self.enc_feeds = [xp.asarray(ids.astype(self.int_type)), xp.asarray(mask).astype(self.int_type)]
        if not self.new_format:
            self.enc_feeds.append(xp.asarray(np.full((batch, 1), start, dtype=self.int_type)))
        self.rep = (lambda a: xp.repeat(a, beams, axis=0)) if beams > 1 else (lambda a: a)
        self.start, self.started = start, False

    def run(self):
        if not self.started:
            self.started = True
            outs = self.encoder(*self.enc_feeds)
            self.mask = self.rep(self.enc_feeds[1])
            n = self.self_states
            if self.new_format:  # the encoder gives the cross attention state; the decoder takes the first step
                self.cross = [self.rep(t) for t in outs]
                self.hidden = None
                rows = self.mask.shape[0]
                self.presents = [self._empty_past(i, rows) for i in range(n)]
                self.tokens = self.xp.asarray(np.full((rows, 1), self.start, dtype=self.int_type))
            else:
                logits, hidden = outs[0], outs[1]
                self.hidden = self.rep(hidden)
                self.presents = [self.rep(t) for t in outs[2:2 + n]]
                self.cross = [self.rep(t) for t in outs[2 + n:]]
            if len(self.cross) != n:
                raise NodeError(f"the encoder has {len(outs)} outputs; the decoder needs {n} cross attention "
                                "states from it")
            if not self.new_format:
                return self.rep(logits[:, -1, :])
        if self.with_hidden and self.hidden is None:
            raise NodeError("the decoder takes encoder_hidden_states, which this encoder does not output")
        feeds = [self.tokens, self.mask] + ([self.hidden] if self.with_hidden else []) + self.presents + self.cross
        outs = self.decoder(*feeds)
        self.presents = outs[1:]
        return outs[0][:, -1, :]

    def _empty_past(self, i: int, rows: int):
        first = 3 if self.with_hidden else 2
        dtype, dims = _declared(self.decoder, first + i, "decoder past input")
        if dims is None or len(dims) != 4 or dims[1] is None or dims[3] is None:
            raise NodeError(f"the decoder's self attention past {i} must be declared with shape [batch, heads, "
                            f"past_length, head_size] and known heads / head_size, got {dims}")
        return self.xp.zeros((rows, dims[1], 0, dims[3]), dtype=dtype or np.float32)

    def advance(self, tokens: np.ndarray, beam_indices: np.ndarray | None):
        xp = self.xp
        self.tokens = xp.asarray(tokens.reshape(-1, 1).astype(self.int_type))
        if beam_indices is not None:
            index = xp.asarray(beam_indices.astype(np.int64))
            self.presents = [xp.take(t, index, axis=0) for t in self.presents]


def _decoder(xp, p: _Params, ids, attention_mask, beams, *, decoder, init_decoder, encoder, decoder_start_token_id):
    if decoder is None:
        raise NodeError("the 'decoder' graph attribute is required")
    if attention_mask is not None:
        _check_mask(attention_mask, ids.shape, "attention_mask")
    if p.model_type == 0:
        return _GptDecoder(xp, decoder, init_decoder, ids, attention_mask, p, beams)
    return _T5Decoder(xp, encoder, decoder, ids, attention_mask, p, int(decoder_start_token_id), beams)


def _vocab(logits, p: _Params):
    """The scores of the vocabulary as float32: a declared ``vocab_size`` drops padded logit columns."""
    v = int(logits.shape[-1])
    if p.vocab_size > 0:
        if p.vocab_size > v:
            raise NodeError(f"vocab_size {p.vocab_size} exceeds the decoder's {v} logits")
        logits = logits[:, :p.vocab_size]
    return logits.astype(np.float32)


def _initial_sequences(ids: np.ndarray, p: _Params, beams: int, start: int) -> np.ndarray:
    if p.model_type == 1:
        ids = np.full((ids.shape[0], 1), start, dtype=np.int32)
    return np.repeat(ids.astype(np.int32), beams, axis=0)


def _check_tokens(sequences: np.ndarray, vocab: int):
    if sequences.size and (sequences.min() < 0 or sequences.max() >= vocab):
        raise NodeError(f"input token ids must lie in [0, {vocab}) (the decoder's vocabulary), got "
                        f"[{sequences.min()}, {sequences.max()}]")


# -- greedy search and sampling --------------------------------------------------------------------

def _greedy(xp, p: _Params, ids, dec, processors, start: int, sampler=None):
    sequences = _initial_sequences(ids, p, 1, start)
    out = np.zeros((p.batch, p.max_length), dtype=np.int32)
    done = np.zeros(p.batch, dtype=bool)
    step, last = 0, None
    while sequences.shape[1] < p.max_length:
        step += 1
        scores = _vocab(dec.run(), p)
        if step == 1:
            _check_tokens(sequences, scores.shape[1])
        scores = processors(scores, sequences, step)
        if sampler is None:
            tokens = to_host(topk(xp, scores, 1, -1)[1]).reshape(-1)
        else:
            tokens, last = sampler(scores)
        tokens = tokens.astype(np.int32)
        done |= tokens == p.eos
        tokens[done] = p.pad
        sequences = np.concatenate([sequences, tokens[:, None]], axis=1)
        if done.all():
            break
        if sequences.shape[1] < p.max_length:
            dec.advance(tokens, None)
    out[:, :sequences.shape[1]] = sequences
    return xp.asarray(out), last


class _StdUniform:
    """The uniform doubles in [0, 1) of onnxruntime's sampling on its Linux builds: libstdc++'s
    ``std::default_random_engine`` (``minstd_rand0``: x <- 16807 x mod 2^31 - 1) seeded with ``seed``,
    read by ``std::uniform_real_distribution<double>`` (two draws per value, ``generate_canonical``)."""

    M = 2147483647

    def __init__(self, seed: int):
        self.x = seed % self.M or 1

    def random(self, n: int) -> np.ndarray:
        r = float(self.M - 1)
        out = np.empty(n)
        for i in range(n):
            total = 0.0
            for scale in (1.0, r):
                self.x = 16807 * self.x % self.M
                total += (self.x - 1) * scale
            out[i] = min(total / (r * r), np.nextafter(1.0, 0.0))
        return out


class _Sampler:
    """Top-p filtering and one multinomial draw per row, as onnxruntime's CPU sampling does."""

    def __init__(self, xp, seed: int, top_p: float, filter_value: float, min_tokens_to_keep: int, custom: int):
        self.xp, self.rng = xp, _StdUniform(seed)
        self.top_p, self.filter_value = float(top_p), float(filter_value)
        self.keep, self.custom = int(min_tokens_to_keep), int(custom)

    def __call__(self, scores):
        xp = self.xp
        rows, vocab = scores.shape
        order = xp.argsort(scores, axis=-1, descending=bool(self.custom), stable=True)
        ranked = xp.take_along_axis(scores, order, axis=-1)
        probs = xp.exp(_log_softmax(xp, ranked))
        cum = xp.cumsum(probs, axis=-1)
        if self.custom:
            # every token after the one where the descending mass first exceeds top_p
            drop = xp.concat([xp.zeros((rows, 1), dtype=bool), cum[:, :-1] > np.float32(self.top_p)], axis=1)
        else:
            limit = np.float32(1) - np.float32(self.top_p)
            drop = (cum <= limit) & (xp.arange(vocab) < vocab - self.keep)[None, :]
        inverse = xp.argsort(order, axis=-1, stable=True)
        drop = xp.take_along_axis(drop, inverse, axis=-1)
        filtered = xp.where(drop, xp.asarray(self.filter_value, dtype=scores.dtype), scores)
        logits = filtered.astype(np.float64)
        weights = xp.exp(logits - xp.max(logits, axis=-1, keepdims=True))
        cdf = xp.cumsum(weights, axis=-1)
        u = xp.asarray(self.rng.random(rows)[:, None]) * cdf[:, -1:]
        token = xp.minimum(xp.sum(cdf <= u, axis=-1), vocab - 1)
        return to_host(token).reshape(-1), filtered


_GREEDY_LIMIT = 16384


@op("GreedySearch", domain=MS, since=1, host_inputs=(1, 2, 3), syncs=SYNCS)
def GreedySearch(xp, input_ids, max_length=None, min_length=None, repetition_penalty=None, vocab_mask=None,
                 prefix_vocab_mask=None, attention_mask=None, *, decoder=None, init_decoder=None, encoder=None,
                 eos_token_id=None, pad_token_id=None, model_type=0, no_repeat_ngram_size=0,
                 decoder_start_token_id=-1, vocab_size=-1):
    """Greedy decoding: sequences [batch, max_length] (int32)."""
    p = _Params(input_ids, max_length, min_length, repetition_penalty, eos_token_id=eos_token_id,
                pad_token_id=pad_token_id, model_type=model_type, no_repeat_ngram_size=no_repeat_ngram_size,
                vocab_size=vocab_size, limit=_GREEDY_LIMIT)
    ids = to_host(input_ids)
    dec = _decoder(xp, p, ids, attention_mask, 1, decoder=decoder, init_decoder=init_decoder, encoder=encoder,
                   decoder_start_token_id=decoder_start_token_id)
    processors = _processors(xp, p, vocab_mask, prefix_vocab_mask, 1)
    return _greedy(xp, p, ids, dec, processors, int(decoder_start_token_id))[0]


@op("Sampling", domain=MS, since=1, host_inputs=(1, 2, 3, 8), n_outputs=True, syncs=SYNCS)
def Sampling(xp, input_ids, max_length=None, min_length=None, repetition_penalty=None, vocab_mask=None,
             prefix_vocab_mask=None, attention_mask=None, presence_mask=None, seed=None, *, decoder=None,
             init_decoder=None, encoder=None, eos_token_id=None, pad_token_id=None, model_type=0,
             no_repeat_ngram_size=0, decoder_start_token_id=-1, vocab_size=-1, temperature=1.0, top_p=0.0,
             filter_value=-1e20, min_tokens_to_keep=0, custom=0, presence_penalty=0.0, n_outputs=1):
    """Top-p sampling: sequences [batch, max_length] (int32) and the last step's filtered scores."""
    p = _Params(input_ids, max_length, min_length, repetition_penalty, eos_token_id=eos_token_id,
                pad_token_id=pad_token_id, model_type=model_type, no_repeat_ngram_size=no_repeat_ngram_size,
                vocab_size=vocab_size, limit=_GREEDY_LIMIT)
    if model_type != 0:
        raise NodeError("Sampling supports model_type 0 (GPT-2 style decoder) only, as onnxruntime does")
    p.temperature = float(temperature)
    seed = _scalar(seed, 0, "seed")
    if seed < 0:
        raise NodeError(f"seed must be >= 0, got {seed}")
    ids = to_host(input_ids)
    dec = _decoder(xp, p, ids, attention_mask, 1, decoder=decoder, init_decoder=init_decoder, encoder=encoder,
                   decoder_start_token_id=decoder_start_token_id)
    processors = _processors(xp, p, vocab_mask, prefix_vocab_mask, 1, presence_mask, presence_penalty)
    sampler = _Sampler(xp, seed, top_p, filter_value, min_tokens_to_keep, custom)
    sequences, filtered = _greedy(xp, p, ids, dec, processors, 0, sampler)
    return (sequences, filtered) if n_outputs > 1 else sequences


def _processors(xp, p: _Params, vocab_mask, prefix_vocab_mask, beams, presence_mask=None, presence_penalty=0.0):
    p.num_beams = beams
    if vocab_mask is not None and vocab_mask.ndim != 1:
        raise NodeError(f"vocab_mask must have shape [vocab_size], got {list(vocab_mask.shape)}")
    if prefix_vocab_mask is not None and (prefix_vocab_mask.ndim != 2 or prefix_vocab_mask.shape[0] != p.batch):
        raise NodeError(f"prefix_vocab_mask must have shape [batch_size={p.batch}, vocab_size], got "
                        f"{list(prefix_vocab_mask.shape)}")
    if presence_mask is not None and (presence_mask.ndim != 2 or presence_mask.shape[0] != p.batch):
        raise NodeError(f"presence_mask must have shape [batch_size={p.batch}, vocab_size], got "
                        f"{list(presence_mask.shape)}")
    return _Processors(xp, p, vocab_mask, prefix_vocab_mask, presence_mask, presence_penalty)


# -- beam search -----------------------------------------------------------------------------------

class _Hypotheses:
    """The best finished sequences of one batch entry, best first (onnxruntime's insertion order on ties)."""

    def __init__(self, size: int, length_penalty: float):
        self.size, self.length_penalty = size, np.float32(length_penalty)
        self.items: list[tuple[float, np.ndarray]] = []
        self.done = False

    def score(self, sum_logprobs, length: int) -> np.float32:
        return np.float32(sum_logprobs) / np.power(np.float32(length), self.length_penalty, dtype=np.float32)

    def add(self, sequence: np.ndarray, sum_logprobs):
        s = self.score(sum_logprobs, len(sequence))
        if len(self.items) == self.size:
            if s <= self.items[-1][0]:
                return
            self.items.pop()
        at = bisect.bisect_right([-x[0] for x in self.items], -s)
        self.items.insert(at, (s, sequence.copy()))

    def can_improve(self, best_sum_logprobs, length: int) -> bool:
        return self.items[-1][0] < self.score(best_sum_logprobs, length)


def _beam_step(p: _Params, hyps: list[_Hypotheses], sequences, top_scores, top_tokens, top_indices, early_stopping):
    """onnxruntime's BeamSearchScorer.Process: the next beams (scores, tokens, source rows)."""
    k = p.num_beams
    scores = np.zeros(p.batch * k, dtype=np.float32)
    tokens = np.full(p.batch * k, p.pad, dtype=np.int32)
    rows = np.zeros(p.batch * k, dtype=np.int64)
    flat = top_scores.reshape(-1)
    length = sequences.shape[1]
    for b, hyp in enumerate(hyps):
        if hyp.done:
            continue
        used = 0
        for j in range(2 * k):
            token, score, row = int(top_tokens[b, j]), top_scores[b, j], b * k + int(top_indices[b, j])
            if token == p.eos:
                if j >= k:
                    continue
                hyp.add(sequences[row], score)
            else:
                scores[b * k + used], tokens[b * k + used], rows[b * k + used] = score, token, row
                used += 1
            if used == k:
                break
        if len(hyp.items) < k:
            continue
        # onnxruntime reads the best candidate from offset batch * num_beams (see the module docstring)
        if early_stopping or not hyp.can_improve(flat[b * k:b * k + 2 * k].max(), length):
            hyp.done = True
    return scores, tokens, rows


_BEAM_LIMIT = 4096


@op("BeamSearch", domain=MS, since=1, host_inputs=(1, 2, 3, 4, 5, 6, 11), n_outputs=True, syncs=SYNCS)
def BeamSearch(xp, input_ids, max_length=None, min_length=None, num_beams=None, num_return_sequences=None,
               length_penalty=None, repetition_penalty=None, vocab_mask=None, prefix_vocab_mask=None,
               attention_mask=None, decoder_input_ids=None, logits_processor=None, *, decoder=None,
               init_decoder=None, encoder=None, eos_token_id=None, pad_token_id=None, model_type=0,
               no_repeat_ngram_size=0, early_stopping=0, decoder_start_token_id=-1, vocab_size=-1, n_outputs=1):
    """Beam search: sequences [batch, num_return_sequences, max_length] (int32), their scores
    [batch, num_return_sequences] and the per-step scores [max_length - sequence_length, batch, num_beams, vocab]."""
    p = _Params(input_ids, max_length, min_length, repetition_penalty, eos_token_id=eos_token_id,
                pad_token_id=pad_token_id, model_type=model_type, no_repeat_ngram_size=no_repeat_ngram_size,
                vocab_size=vocab_size, limit=_BEAM_LIMIT)
    k = _scalar(num_beams, 1, "num_beams")
    if not 1 <= k <= 128:
        raise NodeError(f"num_beams must be in [1, 128], got {k}")
    n_return = _scalar(num_return_sequences, 1, "num_return_sequences")
    if not 1 <= n_return <= k:
        raise NodeError(f"num_return_sequences ({n_return}) must be in [1, num_beams={k}]")
    lp = _scalar(length_penalty, 1.0, "length_penalty", float)
    if decoder_input_ids is not None or _scalar(logits_processor, 0, "logits_processor"):
        raise NodeError("decoder_input_ids and logits_processor (Whisper) are not supported")
    ids = to_host(input_ids)
    if ids.dtype.kind not in "iu":
        raise NodeError(f"input_ids must be integer token ids, got {ids.dtype}")
    dec = _decoder(xp, p, ids, attention_mask, k, decoder=decoder, init_decoder=init_decoder, encoder=encoder,
                   decoder_start_token_id=decoder_start_token_id)
    processors = _processors(xp, p, vocab_mask, prefix_vocab_mask, k)
    sequences = _initial_sequences(ids, p, k, int(decoder_start_token_id))
    hyps = [_Hypotheses(k, lp) for _ in range(p.batch)]
    beam_scores = np.zeros((p.batch, k), dtype=np.float32)
    beam_scores[:, 1:] = -1e9
    beam_scores = xp.asarray(beam_scores.reshape(-1))
    step_scores = []
    step = 0
    while sequences.shape[1] < p.max_length:
        step += 1
        logits = _vocab(dec.run(), p)
        vocab = int(logits.shape[1])
        if step == 1:
            _check_tokens(sequences, vocab)
        scores = processors(_log_softmax(xp, logits), sequences, step) + beam_scores[:, None]
        if n_outputs > 2:
            step_scores.append(scores)
        top, idx = topk(xp, xp.reshape(scores, (p.batch, k * vocab)), 2 * k, -1)
        idx = to_host(idx)
        top = to_host(top)
        new_scores, tokens, rows = _beam_step(p, hyps, sequences, top, idx % vocab, idx // vocab, early_stopping)
        beam_scores = xp.asarray(new_scores)
        sequences = np.concatenate([sequences[rows], tokens[:, None]], axis=1)
        if all(h.done for h in hyps):
            break
        if sequences.shape[1] < p.max_length:
            dec.advance(tokens, rows if k > 1 else None)
    final = to_host(beam_scores)
    out = np.full((p.batch, n_return, p.max_length), p.pad, dtype=np.int32)
    out_scores = np.zeros((p.batch, n_return), dtype=np.float32)
    for b, hyp in enumerate(hyps):
        if not hyp.done:
            for j in range(k):
                hyp.add(sequences[b * k + j], final[b * k + j])
        for r, (s, seq) in enumerate(hyp.items[:n_return]):
            out[b, r, :len(seq)] = seq
            out_scores[b, r] = s
    if n_outputs < 3:
        return xp.asarray(out), xp.asarray(out_scores)
    total = p.max_length - p.prompt_length
    per_step = xp.stack([xp.reshape(s, (p.batch, k, vocab)) for s in step_scores], axis=0)
    if len(step_scores) < total:
        per_step = xp.concat([per_step, xp.zeros((total - len(step_scores), p.batch, k, vocab), dtype=per_step.dtype)])
    return xp.asarray(out), xp.asarray(out_scores), per_step
