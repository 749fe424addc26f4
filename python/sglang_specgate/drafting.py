"""The server's drafting shape as the gate reads it from resolved args: a chain
(``--speculative-eagle-topk 1``) or a tree (topk K > 1), who chose it, and which trees the gate
runs.

A tree is gated like a chain: its speculative state is upstream's, and the off state is
upstream's steps-0 state made fast (worker.py). What the gate adds there is tested on the CPU
only; a tree server's off state is the fast off path's or nothing, since upstream's steps-0 state
built from a tree runs tree code paths with one token that no one has run (docs/design.md).
Nothing here imports SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

CHAIN, TREE = "chain", "tree"
USER, SGLANG = "user", "sglang"
# Set on a ServerArgs record by the release's adapter while it resolves: whether SGLang chose the
# drafting parameters (none was given). Underscored: bookkeeping, which records pickle with them.
CHOSEN_BY_SGLANG_ATTRIBUTE = "_spec_gate_drafting_chosen_by_sglang"
# The chain the project measured, the fix for a tree the gate cannot run.
CHAIN_FLAGS = "--speculative-eagle-topk 1 --speculative-num-steps 3 --speculative-num-draft-tokens 4"


@dataclass(frozen=True)
class Drafting:
    num_steps: int  # S
    topk: int  # K
    num_draft_tokens: int  # D, the verified tokens a request, root included
    chosen_by: str = USER

    @property
    def shape(self) -> str:
        return TREE if self.topk > 1 else CHAIN

    @property
    def max_draft_tokens(self) -> int:
        """The most verified tokens a tree of these steps and topk has: its root and the D - 1
        best of the K + (S - 1)·K² tokens drafted (upstream's organize_draft_results takes a
        topk of D - 1 over them, eagle_utils.py:100-110; select_top_k_tokens, spec_utils.py:279-333)."""
        return 1 + self.topk + (self.num_steps - 1) * self.topk ** 2

    def flags(self) -> str:
        return (f"--speculative-num-steps {self.num_steps} --speculative-eagle-topk {self.topk} "
                f"--speculative-num-draft-tokens {self.num_draft_tokens}")

    def described(self) -> str:
        """The flags, and who gave them, for messages."""
        if self.chosen_by == SGLANG:
            return f"SGLang chose {self.flags()} for this model, as none of them was given"
        return f"got {self.flags()}"

    def snapshot(self) -> dict:
        """/server_info's and the doctor's ``drafting``."""
        return {"shape": self.shape, "topk": self.topk, "num_steps": self.num_steps,
                "num_draft_tokens": self.num_draft_tokens, "chosen_by": self.chosen_by}


def drafting_of(resolved) -> Drafting:
    """The drafting of resolved args (a record or the release's resolved view)."""
    chosen_by_sglang = getattr(resolved, CHOSEN_BY_SGLANG_ATTRIBUTE, False)
    return Drafting(resolved.speculative_num_steps, resolved.speculative_eagle_topk,
                    resolved.speculative_num_draft_tokens, SGLANG if chosen_by_sglang else USER)


def tree_candidates(drafting: Drafting) -> tuple[int, ...]:
    """The draft step counts the auto gate may choose from with this tree: plain and the tree.
    topk is one value per server (upstream sizes the overlap scheduler's draft buffers by it,
    overlap_utils.py:305-323), and upstream builds a state of k < S steps as a chain of k
    (adaptive_runtime_state.py:98-106) whose acceptance the tree's per-depth rates cannot predict."""
    return (0, drafting.num_steps)


def tree_refusal(drafting: Drafting, *, release: str, fast_off_path_releases: tuple[str, ...],
                 page_size: int, slow_backends: list[str], fast_backends: tuple[str, ...]) -> Optional[str]:
    """Why the gate cannot run this tree, with the fix, or None. ``release``: the installed
    SGLang; ``slow_backends``: the attention settings the fast off path does not convert
    (args.slow_off_path_backends), ``fast_backends`` the --attention-backend values it does."""
    chain = f"or chain drafting: {CHAIN_FLAGS}"
    if release not in fast_off_path_releases:
        return (f"tree drafting needs the gate's fast off path, which has not run on a GPU with SGLang "
                f"{release}: off steps would run upstream's steps-0 state built for a tree, which nothing has "
                f"run. Use SGLang {' or '.join(fast_off_path_releases)}, {chain}")
    if not 2 <= drafting.num_draft_tokens <= drafting.max_draft_tokens:
        return (f"--speculative-num-draft-tokens {drafting.num_draft_tokens} must be from 2 to "
                f"{drafting.max_draft_tokens} with --speculative-num-steps {drafting.num_steps} "
                f"--speculative-eagle-topk {drafting.topk}: a tree verifies its root and the best D - 1 of "
                f"the {drafting.max_draft_tokens - 1} tokens it drafts (SGLang itself fails at graph capture "
                f"outside that). Give D in that range, {chain}")
    if page_size > 1:
        return (f"tree drafting with --page-size {page_size}: every decode step, off ones too, would "
                f"reserve {drafting.topk} page-aligned branches a request (allocation_sizing.py), and "
                f"upstream's paged tree drafting copies prefix tails the gate's buffered draft KV writes "
                f"were never checked against. Use --page-size 1, {chain}")
    if slow_backends:
        *others, last = fast_backends
        return (f"tree drafting with {'; '.join(slow_backends)}: the gate's off steps are fast on "
                f"{', '.join(others)} or {last} attention only, and elsewhere would run upstream's steps-0 state "
                "through its tree code paths with one token, which nothing has run. Start with "
                f"--attention-backend {' or '.join(fast_backends)} (the draft's likewise), {chain}")
    return None
