"""Which messages to acknowledge now, in as few frames as possible: the fan-out worker's, the notifier's and the
delivery workers' consumers. Pure.

Each basic.ack is a write on the connection's thread, which also receives and hands out every message: at a few
hundred deliveries per second, acking one by one kept that thread busy most of the time. Finished messages wait
until the oldest unsettled one is finished and go in one `multiple` ack (a multiple ack past an unfinished one
would settle a message still being worked on); finished messages held behind a slow one are acked one by one once
more than `hold` wait, so they never fill the prefetch. `hold=0`: every finished message is acked now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable


def frames(unsettled: Iterable[int], done: Collection[int], hold: int = 0) -> list[tuple[int, bool]]:
    """The (delivery tag, multiple) ack frames to send, given every unsettled tag in delivery order and the finished
    ones among them."""
    prefix_end = None
    for tag in unsettled:
        if tag not in done:
            break
        prefix_end = tag
    out = [] if prefix_end is None else [(prefix_end, True)]
    rest = sorted(tag for tag in done if prefix_end is None or tag > prefix_end)
    if len(rest) > hold:
        out += [(tag, False) for tag in rest]
    return out
