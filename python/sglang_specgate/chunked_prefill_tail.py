"""The draft's prefill input after a prompt chunk, written without stalling the scheduler.

EAGLE's draft prefill shifts each request's tokens one place left and appends a tail token: the
target's sampled token or, for the request whose prompt goes on in the next chunk, that next
prompt token (SGLang PR #26329). SGLang 0.5.17 writes the latter as ``tail_tokens[i] = token``.
On a CUDA tensor PyTorch turns that assignment into a copy from a pageable host scalar followed
by a stream synchronize, so every prefill batch that ends in a chunk blocks the scheduler until
the GPU has finished all the work queued before it, and the overlap scheduler loses its lead;
under load that one line is a large share of the scheduler's time (docs/design.md). ``fill_``
with a Python number passes the value as a kernel argument instead: no copy, no synchronize.
"""

from __future__ import annotations

import torch


def tail_tokens(batch, next_token_ids: torch.Tensor) -> torch.Tensor:
    """Each request's tail token for the draft's prefill, as SGLang's
    ``_eagle_prefill_tail_tokens`` defines it."""
    tails = next_token_ids.to(batch.input_ids.dtype)
    next_prompt_token = batch.chunked_req_next_prompt_token
    if next_prompt_token is None:
        return tails
    row = next((i for i, req in enumerate(batch.reqs) if req is batch.chunked_req), None)
    if row is None:
        return tails
    # .to() returns next_token_ids itself when the dtypes match, and the caller keeps those.
    tails = tails.clone()
    tails[row : row + 1].fill_(next_prompt_token)
    return tails
