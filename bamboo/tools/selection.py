"""Bounding the tool list for large catalogues: which tools a prompt shows, and how.

Two controls, and no behaviour change when the catalogue is small:

* a **token budget** measured against the assembled prompt with a real tokenizer that works offline
  (budget = context window - tokens of the prompt without tools - margin), and
* a **relevance cap**: at most ``max_full_schemas`` tools get their full JSON schema.

When either bites, ``ToolSelector`` ranks tools from two sources through a ``VectorIndex``: tool
descriptions matching the query, and tools used by similar past human-approved runs (weighted higher
when the run ended in a cause). A reserved quota keeps slots for description matches so newly added
tools are never crowded out by history. Vectors are namespaced by a configuration hash so differently
configured deployments sharing one index do not thrash each other.

Selection trims the prompt only. It never changes what may be called: the allow-set is computed from
the full catalogue by the trust policy, and an omitted tool stays callable.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from functools import lru_cache
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from bamboo.tools.model import ToolSpec
from bamboo.tools.vector_index import VectorIndex, VectorItem

log = logging.getLogger(__name__)

TOOLS_SECTION = "tool_catalogue"
RUNS_SECTION = "approved_runs"
TOOLS_PLACEHOLDER = "{tools}"

TokenCounter = Callable[[str], int]


class TextEmbedder(Protocol):
    """The slice of ``bamboo.embeddings.Embedder`` selection uses."""

    dim: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class ToolBudgetError(ValueError):
    """The prompt leaves no room for even one tool; shorten it or raise the context window."""


class RetrievalUnavailable(RuntimeError):
    """Selection was needed but the vector index or embedder failed. Interactive callers should abort
    the turn with this message; automatic callers may fall back to ``truncated_block``."""


@lru_cache(maxsize=1)
def offline_token_counter() -> TokenCounter:
    """A WordPiece tokenizer shipped inside an installed package, so counting needs no network.

    It approximates the serving model's tokenizer; the budget margin absorbs the difference.
    """
    from tokenizers import Tokenizer

    from bamboo.embeddings.local import minilm_tokenizer_path

    tokenizer = Tokenizer.from_file(str(minilm_tokenizer_path()))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    @lru_cache(maxsize=16384)
    def count_line(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    def count(text: str) -> int:
        # Tool lines recur turn after turn, so they are cached; whole prompts are not worth keeping.
        if len(text) < 4096:
            return count_line(text)
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


class SelectionConfig(BaseModel):
    context_window: int = Field(default=8192, gt=0, description="tokens of the served model's window (per slot)")
    budget_margin: int = Field(default=1024, ge=0, description="tokens kept for the answer and headroom")
    max_full_schemas: int = Field(default=25, ge=1, description="primary knob: tools shown with a full schema")
    candidate_k: int = Field(default=0, ge=0, description="ranking pool per source; 0 = max(40, 3 x the cap)")
    reserved_explore: int = Field(default=4, ge=0, description="slots guaranteed to description matches")
    cause_run_weight: float = Field(default=2.0, gt=0, description="weight of past runs that ended in a cause")

    def pool(self) -> int:
        return self.candidate_k or max(40, 3 * self.max_full_schemas)


class ToolBlock(BaseModel):
    """The rendered tool list and what happened to every tool."""

    text: str
    full: list[str] = Field(default_factory=list)
    compact: list[str] = Field(default_factory=list)
    omitted: list[str] = Field(default_factory=list)
    prompt_tokens: int = 0
    budget: int = 0
    mode: Literal["all", "selected", "truncated"] = "all"


# --- rendering ---------------------------------------------------------------------------------


def _flags(spec: ToolSpec) -> str:
    access = "external" if spec.external_access else "internal"
    effect = "read-only" if spec.read_only else "MODIFIES-STATE"
    return f"[{access}, {effect}]"


def _arg_names(spec: ToolSpec) -> str:
    props = spec.input_schema.get("properties") or {}
    required = set(spec.input_schema.get("required") or [])
    return ", ".join(n if n in required else f"{n}?" for n in props)


def render_full(spec: ToolSpec) -> str:
    schema = {k: v for k, v in spec.input_schema.items() if k in ("properties", "required")}
    return f"- {spec.name} {_flags(spec)}: {spec.description}\n  args schema: {json.dumps(schema, separators=(',', ':'))}"


def render_compact(spec: ToolSpec) -> str:
    first = " ".join(spec.description.split(". ")[0].split()).rstrip(".")
    return f"- {spec.name}({_arg_names(spec)}) {_flags(spec)}: {first}"


def _assemble(prompt: str, lines: Sequence[str]) -> str:
    return prompt.replace(TOOLS_PLACEHOLDER, "\n".join(lines))


def prompt_budget(prompt: str, config: SelectionConfig, count: TokenCounter) -> int:
    """Tokens left for the tool block in a prompt that contains the ``{tools}`` placeholder once."""
    if prompt.count(TOOLS_PLACEHOLDER) != 1:
        raise ValueError(f"the prompt must contain {TOOLS_PLACEHOLDER} exactly once")
    return config.context_window - count(_assemble(prompt, [])) - config.budget_margin


def fill_block(
    prompt: str,
    ordered: Sequence[ToolSpec],
    full_names: set[str],
    config: SelectionConfig,
    count: TokenCounter,
    mode: Literal["all", "selected", "truncated"],
) -> ToolBlock:
    """Greedily add tools in order (full where asked, else compact) while the assembled prompt fits.

    Lines are costed one by one (WordPiece splits on whitespace, so costs add up), and the assembled
    prompt is measured once at the end; a later, smaller line may still fit after a larger one did not.
    """
    budget = prompt_budget(prompt, config, count)
    if budget <= 0:
        raise ToolBudgetError(
            f"the prompt alone uses {config.context_window - config.budget_margin - budget} tokens of a "
            f"{config.context_window}-token window (margin {config.budget_margin}); no room for tools"
        )
    kept: list[tuple[str, str, bool]] = []  # (name, rendered line, full schema?), in prompt order
    omitted: list[str] = []
    used = 0
    for spec in ordered:
        if budget - used < 4:  # no tool line is that short; the rest cannot fit
            omitted.append(spec.name)
            continue
        is_full = spec.name in full_names
        line = render_full(spec) if is_full else render_compact(spec)
        cost = count(line) + 1
        if used + cost > budget and is_full:
            is_full, line = False, render_compact(spec)
            cost = count(line) + 1
        if used + cost > budget:
            omitted.append(spec.name)
            continue
        kept.append((spec.name, line, is_full))
        used += cost
    text = _assemble(prompt, [line for _, line, _ in kept])
    total = count(text)
    limit = config.context_window - config.budget_margin
    while total > limit and kept:  # the additive estimate was off; drop from the end until it fits
        omitted.append(kept.pop()[0])
        text = _assemble(prompt, [line for _, line, _ in kept])
        total = count(text)
    full = [name for name, _, is_full in kept if is_full]
    compact = [name for name, _, is_full in kept if not is_full]
    if omitted:
        log.info("tool block: %d full, %d compact, %d omitted (%s)", len(full), len(compact), len(omitted), mode)
    return ToolBlock(text=text, full=full, compact=compact, omitted=omitted, prompt_tokens=total,
                     budget=budget, mode=mode)


def truncated_block(
    prompt: str, tools: Sequence[ToolSpec], config: SelectionConfig, count: TokenCounter | None = None
) -> ToolBlock:
    """The degraded list for automatic callers when retrieval is down: compact lines in catalogue order."""
    return fill_block(prompt, tools, set(), config, count or offline_token_counter(), "truncated")


# --- retrieval ---------------------------------------------------------------------------------


def config_namespace(servers_fingerprint: str, embedder_id: str, dim: int) -> str:
    """Same MCP configuration and embedding model -> same namespace; anything else -> a different one."""
    digest = hashlib.sha256(f"{servers_fingerprint}\x00{embedder_id}\x00{dim}".encode()).hexdigest()
    return f"tools-{digest[:16]}"


def tool_text(spec: ToolSpec) -> str:
    """What a tool is matched by: its name and description (selection and the reuse step's tool check)."""
    return f"{spec.name}: {spec.description}"


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ToolSelector:
    def __init__(
        self,
        index: VectorIndex,
        embedder: TextEmbedder,
        namespace: str,
        config: SelectionConfig | None = None,
        count: TokenCounter | None = None,
    ) -> None:
        self.index = index
        self.embedder = embedder
        self.namespace = namespace
        self.config = config or SelectionConfig()
        self.count = count or offline_token_counter()
        self._indexed: dict[str, str] = {}

    async def ensure_indexed(self, tools: Sequence[ToolSpec]) -> int:
        """Embed only tools that are new or whose description changed since this selector last wrote."""
        stale = [t for t in tools if self._indexed.get(t.name) != _content_hash(tool_text(t))]
        if not stale:
            return 0
        texts = [tool_text(t) for t in stale]
        vectors = await self.embedder.embed(texts)
        items = [
            VectorItem(id=t.name, content=text, embedding=v, meta={"hash": _content_hash(text)})
            for t, text, v in zip(stale, texts, vectors, strict=True)
        ]
        await self.index.upsert(self.namespace, TOOLS_SECTION, items)
        self._indexed.update({i.id: i.meta["hash"] for i in items})
        return len(items)

    async def record_approved_run(self, prompt: str, tools_used: Sequence[str], ended_in_cause: bool) -> str:
        """Index a human-approved run as (prompt -> tools); re-recording with a cause raises its weight."""
        tools = sorted(set(tools_used))
        run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.namespace}|{','.join(tools)}|{prompt}"))
        [vector] = await self.embedder.embed([prompt])
        weight = self.config.cause_run_weight if ended_in_cause else 1.0
        item = VectorItem(id=run_id, content=prompt, embedding=vector, meta={"tools": tools, "weight": weight})
        await self.index.upsert(self.namespace, RUNS_SECTION, [item])
        return run_id

    async def rank(self, query: str, tools: Sequence[ToolSpec]) -> list[str]:
        """Priority order of tool names; raises RetrievalUnavailable if the index or embedder fails."""
        live = {t.name for t in tools}
        try:
            await self.ensure_indexed(tools)
            # Indexed tools that are not live (excluded for this page, or gone from the catalogue)
            # would take places in the pool; widen the search by as many.
            k = self.config.pool() + len(set(self._indexed) - live)
            [vector] = await self.embedder.embed([query])
            described = await self.index.search(self.namespace, TOOLS_SECTION, vector, k)
        except Exception as exc:
            raise RetrievalUnavailable(f"tool retrieval failed: {type(exc).__name__}: {exc}") from exc
        try:
            runs = await self.index.search(self.namespace, RUNS_SECTION, vector, k)
        except Exception as exc:  # history is a bonus; descriptions alone still rank every tool
            log.warning("past-run retrieval failed, ranking by descriptions only: %s", exc)
            runs = []
        by_description = [h.id for h in described if h.id in live]
        run_scores: dict[str, float] = {}
        for hit in runs:
            weight = float(hit.meta.get("weight", 1.0))
            for name in hit.meta.get("tools", []):
                if name in live:
                    run_scores[name] = run_scores.get(name, 0.0) + max(hit.score, 0.0) * weight
        by_history = sorted(run_scores, key=lambda n: (-run_scores[n], n))
        reserved = min(self.config.reserved_explore, self.config.max_full_schemas)
        return reserve_full_slots(merge_sources(by_history, by_description, reserved),
                                  by_description[:reserved], self.config.max_full_schemas)

    async def select(
        self, prompt: str, query: str, tools: Sequence[ToolSpec], exclude: Collection[str] = ()
    ) -> ToolBlock:
        """The tool block for ``prompt`` (which holds ``{tools}``); retrieval only when a control bites.

        ``exclude`` asks for a fresh page: when the model found nothing fitting among the tools it was
        shown, pass their names to offer the next candidates (the excluded stay callable all the same).
        """
        if exclude:
            tools = [t for t in tools if t.name not in set(exclude)]
        cap = self.config.max_full_schemas
        names = {t.name for t in tools}
        if len(tools) <= cap:
            block = await asyncio.to_thread(fill_block, prompt, tools, names, self.config, self.count, "all")
            if not block.omitted and not block.compact:
                return block
        order = await self.rank(query, tools)
        by_name = {t.name: t for t in tools}
        ranked = [by_name[n] for n in order]
        rest = [t for t in tools if t.name not in set(order)]
        # Counting may ask the served model's tokenizer over HTTP: never on the event loop.
        return await asyncio.to_thread(fill_block, prompt, [*ranked, *rest], set(order[:cap]), self.config,
                                       self.count, "selected")

    def configure(self, config: SelectionConfig, count: TokenCounter | None = None) -> None:
        """Adopt the served model's window and tokenizer once they are known (see ``bamboo.llm.window``)."""
        self.config = config
        if count is not None:
            self.count = count


def merge_sources(history: Sequence[str], described: Sequence[str], reserved: int) -> list[str]:
    """Interleave the top ``reserved`` description matches with history at the front, then the rest of
    history, then the rest of the descriptions; each name once."""
    out: list[str] = []
    seen: set[str] = set()

    def take(name: str) -> None:
        if name not in seen:
            seen.add(name)
            out.append(name)

    hist = list(history)
    for name in described[:reserved]:
        if hist:
            take(hist.pop(0))
        take(name)
    for name in hist:
        take(name)
    for name in described:
        take(name)
    return out


def reserve_full_slots(priority: Sequence[str], reserved: Sequence[str], cap: int) -> list[str]:
    """Reorder so the first ``cap`` names are the full-schema set and always include ``reserved``:
    history can fill the other slots but never push the top description matches out."""
    must = [n for n in reserved if n in priority]
    full = set(must) | set([n for n in priority if n not in must][: max(cap - len(must), 0)])
    return [n for n in priority if n in full] + [n for n in priority if n not in full]
