from __future__ import annotations

from collections import Counter

from hypothesis import example, given, settings
from hypothesis import strategies as st

from services.cdc_relay.confirms import ConfirmBook


def test_single_and_multiple_acks() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    for name in "abcd":
        book.sent(name, name)
    assert book.acked(2, multiple=False).confirmed == ["b"]
    assert book.acked(3, multiple=True).confirmed == ["a", "c"]
    assert len(book) == 1


def test_a_returned_message_acked_is_a_failure() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    book.sent("m1", "a")
    book.sent("m2", "b")
    book.returned("m2")
    outcome = book.acked(2, multiple=True)
    assert outcome.confirmed == ["a"] and outcome.failed == ["b"]
    book.sent("m2", "b")  # the retry, routed this time
    assert book.acked(3, multiple=False).confirmed == ["b"]


def test_nacks_fail_and_reset_hands_everything_back() -> None:
    book: ConfirmBook[str] = ConfirmBook()
    for name in "abc":
        book.sent(name, name)
    assert book.nacked(1, multiple=False).failed == ["a"]
    assert book.reset() == ["b", "c"]
    assert book.sent("x", "x") == 1  # a new channel numbers from 1


def ident(item: int) -> str:
    """Message ids repeat, as a message published again keeps its id."""
    return f"m{item % 5}"


@given(st.lists(st.tuples(st.sampled_from(["send", "send*", "ack", "ack*", "nack", "nack*", "return", "reset"]),
                          st.integers(min_value=0, max_value=40)), max_size=120))
@example([("send", 0), ("send", 0), ("ack*", 1), ("reset", 0), ("send", 0), ("ack*", 1)])  # numbering restarts
@example([("send", 0), ("return", 0), ("reset", 0)] + [("send", 0)] * 6 + [("ack*", 6)])  # a reset forgets returns
@example([("send", 0), ("return", 0), ("nack", 1)] + [("send", 0)] * 5 + [("ack", 6)])  # so does a nack
@settings(max_examples=300)
def test_settles_exactly_what_a_plain_model_settles(steps: list[tuple[str, int]]) -> None:
    """Any interleaving of publishes (one or a batch at a time), returns, single and `multiple` acks and nacks (in
    any tag order) and channel resets: each item comes out once, in tag order, confirmed or failed as the obvious
    model of the broker says (a returned message's ack is a failure; a nack or a reset forgets its return)."""
    book: ConfirmBook[int] = ConfirmBook()
    model: dict[int, int] = {}  # tag -> item, unconfirmed
    returned: Counter[str] = Counter()
    next_tag, item = 1, 0
    for action, n in steps:
        if action == "send":
            assert book.sent(ident(item), item) == next_tag
            model[next_tag] = item
            next_tag, item = next_tag + 1, item + 1
        elif action == "send*":  # a batch of n % 4 in one call
            batch = [(ident(item + i), item + i) for i in range(n % 4)]
            book.sent_many(batch)
            for i in range(n % 4):
                model[next_tag + i] = item + i
            next_tag, item = next_tag + n % 4, item + n % 4
        elif action == "return":
            if model:
                message_id = ident(model[sorted(model)[n % len(model)]])
                book.returned(message_id)
                returned[message_id] += 1
        elif action == "reset":
            assert book.reset() == [model[t] for t in sorted(model)]
            model, next_tag = {}, 1
            returned.clear()
        else:
            tag = n % next_tag if next_tag > 1 else 0
            tags = sorted(t for t in model if t <= tag) if action.endswith("*") else [tag] * (tag in model)
            confirmed, failed = [], []
            for t in tags:
                settled = model.pop(t)
                message_id = ident(settled)
                if action.startswith("nack"):
                    returned.pop(message_id, None)
                    failed.append(settled)
                elif returned[message_id] > 0:
                    returned[message_id] -= 1
                    failed.append(settled)
                else:
                    confirmed.append(settled)
            outcome = (book.acked if action.startswith("ack") else book.nacked)(tag, action.endswith("*"))
            assert (outcome.confirmed, outcome.failed) == (confirmed, failed)
        assert len(book) == len(model)
