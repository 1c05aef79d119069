"""The candidates part of a search space: each speculative method's ranges and choices."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

__all__ = [
    "MAX_RANGE",
    "adaptive_text",
    "METHOD_NAMES",
    "BlockDraftMethod",
    "DraftModelMethod",
    "DraftSampleMethod",
    "HeadMethod",
    "IntRange",
    "Methods",
    "MtpMethod",
    "NgramMethod",
    "SpaceError",
    "StackedHeadMethod",
    "StartPoint",
    "SuffixMethod",
]


Loc = tuple[str | int, ...]

# The largest depth or n-gram size a range may reach: far beyond what pays, small enough that
# listing every value is cheap.
MAX_RANGE = 64


class SpaceError(ValueError):
    """A search space that cannot be used; the message names each bad field and why.

    ``errors`` holds the same as (field path, reason) pairs, the path as pydantic gives it
    (keys as written, list indices as ints); empty for a one-line refusal of the whole file."""

    def __init__(self, message: str, errors: Sequence[tuple[Loc, str]] = ()) -> None:
        super().__init__(message)
        self.errors: tuple[tuple[Loc, str], ...] = tuple(errors)


class StrictModel(BaseModel):
    """Unknown keys are refused (a typo is an error, not a silent default), and so are NaN
    and infinities (no limit or comparison means anything with them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class IntRange(StrictModel):
    """Inclusive integer range ``{min: 1, max: 4}``."""

    min: Annotated[int, Field(ge=1, le=MAX_RANGE)]
    max: Annotated[int, Field(ge=1, le=MAX_RANGE)]

    @model_validator(mode="after")
    def _ordered(self) -> IntRange:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    def values(self) -> list[int]:
        return list(range(self.min, self.max + 1))


class NgramMethod(StrictModel):
    """Prompt lookup: proposes continuations of n-grams already in the context."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=4)
    prompt_lookup_min: IntRange = IntRange(min=1, max=3)
    prompt_lookup_max: IntRange = IntRange(min=2, max=5)

    @model_validator(mode="after")
    def _lookup_consistent(self) -> NgramMethod:
        if self.prompt_lookup_max.max < self.prompt_lookup_min.min:
            raise ValueError("prompt_lookup_max.max must be >= prompt_lookup_min.min")
        return self


def _no_repeats(v: list[str]) -> list[str]:
    if len(set(v)) != len(v):
        raise ValueError("paths must not repeat")
    return v


# One or more checkpoint folders, each at most once (the error names the field).
CheckpointList = Annotated[list[str], Field(min_length=1), AfterValidator(_no_repeats)]


DraftSampleMethod = Literal["greedy", "probabilistic"]


def _distinct(v: list[Any]) -> list[Any]:
    if len(set(v)) != len(v):
        raise ValueError("values must not repeat")
    return v


# vLLM's draft_sample_method as a searched axis (None: not searched, the engine's default of
# greedy drafts). Only sampled workloads tell the two apart: the space refuses it otherwise.
DraftSampling = Annotated[list[DraftSampleMethod], Field(min_length=1), AfterValidator(_distinct)]


def _draft_sampling_field() -> Any:
    return Field(
        None,
        description="How the proposer drafts under sampling, as vLLM's draft_sample_method: "
        "greedy (its argmax, accepted with probability p_target) or probabilistic (sampled "
        "from its own distribution, verified with its full probabilities). Listed: searched. "
        "Only for spaces with a sampled workload; the engine must have the option.",
    )


class DraftModelMethod(StrictModel):
    """A separate small model that shares the target's vocabulary."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=4)
    drafts: CheckpointList
    draft_sample_method: DraftSampling | None = _draft_sampling_field()


CandidateSteps = Annotated[
    list[Annotated[int, Field(ge=1, le=MAX_RANGE)]], Field(min_length=1), AfterValidator(_distinct)
]


def _adaptive_choices(v: list[Any]) -> list[Any]:
    if any(c is True for c in v):
        raise ValueError(
            "true is not a choice: list the candidate steps the controller may pick from, "
            "e.g. [1, 3, 7] (false: off)"
        )
    if len({adaptive_text(c) for c in v}) != len(v):
        raise ValueError("values must not repeat")
    return v


def adaptive_text(choice: bool | list[int]) -> str:
    """A choice of the ``adaptive`` axis as a trial's parameter: ``off``, or the candidate
    steps sorted and joined, ``1,3,7`` (Optuna's choices must be scalars)."""
    if choice is False:
        return "off"
    return ",".join(str(s) for s in sorted(choice))  # type: ignore[union-attr]


# SGLang's adaptive speculation as a searched axis: each choice off (false) or on with the
# candidate steps its controller picks from per batch, by the acceptance it sees.
AdaptiveAxis = Annotated[
    list[bool | CandidateSteps], Field(min_length=1), AfterValidator(_adaptive_choices)
]


class HeadMethod(StrictModel):
    """EAGLE or EAGLE-3: a head trained on one target's hidden states (checked before launch:
    its width, vocabulary and input layer must fit this target)."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=4)
    heads: CheckpointList
    draft_sample_method: DraftSampling | None = _draft_sampling_field()
    adaptive: AdaptiveAxis | None = Field(
        None,
        description="SGLang's adaptive speculation: each choice "
        "false (off, a fixed depth) or the candidate steps its controller picks from by the "
        "acceptance it sees, e.g. [1, 3, 7]; the trial's depth is added to them as the step "
        "it starts at. Listed: searched. SGLang only: other engines refuse a choice that is "
        "not false before a launch.",
    )

    @property
    def adaptive_choices(self) -> list[str] | None:
        """The ``adaptive`` axis as trial parameters (``adaptive_text``), None unsearched."""
        return None if self.adaptive is None else [adaptive_text(c) for c in self.adaptive]


class StackedHeadMethod(StrictModel):
    """Medusa heads or an MLP speculator: extra heads trained on one target, the i-th
    predicting position i from the target's last hidden state (no draft forward of its own
    beyond them); ``num_speculative_tokens`` at most the heads it has."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=4)
    heads: CheckpointList


class BlockDraftMethod(StrictModel):
    """DFlash or DSpark (vLLM): a draft trained on one target's hidden states that proposes
    a block of tokens in one forward. No tiny checkpoint exists here; the space, pre-flight
    and exports know them, and a GPU job with a published checkpoint can search them."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=8)
    heads: CheckpointList


class MtpMethod(StrictModel):
    """The checkpoint's own multi-token-prediction layers (DeepSeek-V3, MiMo, Qwen3-Next...)."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=1)
    model: str | None = Field(
        None,
        description="An MTP checkpoint served instead of engine.model. It is another target: "
        "the job measures its own baseline and reports it apart, never against engine.model's.",
    )


def _listed(item: Any) -> Any:
    """A searched knob's listed values, at least one, none repeated."""
    return Annotated[list[item], Field(min_length=1), AfterValidator(_distinct)]


TreeDepths = _listed(Annotated[int, Field(ge=1, le=1024)])
CachedRequests = _listed(Annotated[int, Field(ge=0, le=10_000_000)])
SpecFactors = _listed(Annotated[float, Field(gt=0, le=64)])
TokenProbs = _listed(Annotated[float, Field(ge=0, le=1)])


class SuffixMethod(StrictModel):
    """Suffix decoding (vLLM with Arctic Inference): model-free, it drafts from a suffix tree
    over each request's prompt and output and a global tree over earlier requests' outputs.
    ``num_speculative_tokens`` only caps a step's draft: how many it drafts varies per step.
    Each knob, when listed, is a searched axis; left out, it is the engine's default."""

    num_speculative_tokens: IntRange = IntRange(min=1, max=8)
    max_tree_depth: TreeDepths | None = Field(
        None,
        description="suffix_decoding_max_tree_depth: the longest pattern and draft the trees "
        "hold (engine default 24)",
    )
    # Per-request trees unless asked: a job measures by sending its workload's prompts
    # again (warm-up, passes of a repeat), and a global tree drafts a repeat from its own
    # earlier response, a gain only traffic that repeats itself would see.
    max_cached_requests: CachedRequests | None = Field(
        [0],
        description="suffix_decoding_max_cached_requests: earlier requests kept in the global "
        "tree (engine default 10000); SpecTune's default [0] keeps it off, since a job sends "
        "its prompts more than once and a global tree would draft those repeats from their "
        "own earlier responses. List values above 0 for traffic that repeats itself.",
    )
    max_spec_factor: SpecFactors | None = Field(
        None,
        description="suffix_decoding_max_spec_factor: a draft is at most this many times the "
        "matched pattern's length (engine default 1.0)",
    )
    min_token_prob: TokenProbs | None = Field(
        None,
        description="suffix_decoding_min_token_prob: the least estimated probability of a "
        "drafted token (engine default 0.1)",
    )


METHOD_NAMES = (
    "ngram",
    "draft_model",
    "eagle",
    "eagle3",
    "mtp",
    "suffix",
    "medusa",
    "mlp_speculator",
    "ngram_gpu",
    "dflash",
    "dspark",
)


class Methods(StrictModel):
    ngram: NgramMethod | None = None
    draft_model: DraftModelMethod | None = None
    eagle: HeadMethod | None = None
    eagle3: HeadMethod | None = None
    mtp: MtpMethod | None = None
    suffix: SuffixMethod | None = None
    medusa: StackedHeadMethod | None = None
    mlp_speculator: StackedHeadMethod | None = None
    ngram_gpu: NgramMethod | None = None
    dflash: BlockDraftMethod | None = None
    dspark: BlockDraftMethod | None = None

    def enabled(self) -> list[str]:
        return [name for name in METHOD_NAMES if getattr(self, name) is not None]


class StartPoint(StrictModel):
    """A known-good candidate measured right after the baseline (before the sampler guesses)."""

    method: Literal[
        "ngram",
        "draft_model",
        "eagle",
        "eagle3",
        "mtp",
        "suffix",
        "medusa",
        "mlp_speculator",
        "ngram_gpu",
        "dflash",
        "dspark",
    ]
    num_speculative_tokens: Annotated[int, Field(ge=1, le=MAX_RANGE)]
    prompt_lookup_min: Annotated[int, Field(ge=1, le=MAX_RANGE)] | None = None
    prompt_lookup_max: Annotated[int, Field(ge=1, le=MAX_RANGE)] | None = None
    draft: str | None = None
    head: str | None = Field(
        None,
        description="a method with heads (eagle, eagle3, medusa, mlp_speculator, dflash, "
        "dspark): one of them",
    )
    max_num_seqs: Annotated[int, Field(ge=1, le=4096)] | None = None
    memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
