"""The constants of the client's promise, the same in every client of the project.

Their one source is ``core/src/protocol.rs``, which writes them to
``conformance/protocol.json``; ``tests/test_protocol.py`` holds these literals equal
to that file, and the conformance adapter reports them in its hello. Seconds here,
milliseconds there.
"""

from __future__ import annotations

#: A holding is renewed every TTL / this: at a third of its TTL.
RENEWAL_DIVISOR = 3

#: The lease ends ``margin(ttl)`` before *send time + TTL*: this share of the TTL,
#: in percent, at least ``LEASE_MARGIN_MIN`` seconds, never more than the TTL.
LEASE_MARGIN_PERCENT = 10
LEASE_MARGIN_MIN = 0.05

#: How much longer than its timeout a wait may go unanswered before the holder gives
#: up on the server (a hung server, a cut network): the server answers a timed-out
#: wait itself, so this covers the reply's way back on a busy machine.
WAIT_MARGIN = 1.0

#: How long the withdrawal sent after an unanswered wait may take: the server is not
#: answering, so it is sent rather than waited for.
WITHDRAW_AFTER_TIMEOUT = 0.1

#: How long a release, an extend, or the withdrawal of an acquire cancelled or cut
#: short for another reason may take (the holding's TTL ends what it could not).
RELEASE_LIMIT = 1.0

#: How long a connect, the backend probe, or an acquire that does not wait may take.
CONTROL_LIMIT = 2.0

#: The version of the library this client carries (``lock_version``), the newest it
#: accepts.
LIBRARY_VERSION = 3

#: The oldest library version this client accepts.
MIN_LIBRARY_VERSION = 2
