"""An LRU of prompt-prefix blocks, the way paged-attention servers reuse a shared prefix.

A prompt is cut into full blocks of `block_size` tokens; each block is keyed by a hash chained
over every block before it, so a key names a whole prefix, not just one block's text. A lookup
walks the blocks from the start and stops at the first miss: only a leading run of cached blocks
saves prefill work. Every full block is then inserted (or refreshed), and the least recently used
blocks are evicted beyond the capacity.
"""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    def __init__(self, block_size: int, capacity_blocks: int):
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def admit(self, tokens: list[str]) -> int:
        """Look the prompt up, cache its blocks, and return how many tokens were already cached.

        At least one token is always computed, as servers do, so a fully cached prompt reports
        one token less than its length.
        """
        if not self.capacity:
            return 0
        size = self.block_size
        blocks = self._blocks
        key = 0
        hits = 0
        leading = True
        for start in range(0, len(tokens) - size + 1, size):
            key = hash((key, *tokens[start : start + size]))
            if key in blocks:
                blocks.move_to_end(key)  # refreshed even past a miss: it is still in use
                hits += leading
            else:
                leading = False
                blocks[key] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)
        return min(hits * size, max(len(tokens) - 1, 0))
