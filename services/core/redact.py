"""Connection strings as error messages may show them: without their password. Pure.

A malformed `WALFEED_DATABASE_URL` or `WALFEED_AMQP_URL` is named in the error that stops the process, and start-up
errors end up in journals and CI logs: the value shown keeps everything but the password (of the URL's userinfo,
a `password=` query option, or a libpq `password=` keyword), so the mistake can still be seen.
"""

from __future__ import annotations

import re

MASK = "***"
# user:password@ in a URL's authority: the password runs up to the last '@' before the host.
# Also without a scheme, as a malformed value may be written.
_USERINFO = re.compile(r"(?P<scheme>(?:[A-Za-z][A-Za-z0-9+.-]*:)?//)?(?P<user>[^:/?#@\s,]*):(?P<password>[^/?#\s]*)@")
# password=... as a URL query option or a libpq keyword (quoted 'like this' or up to the next separator).
_KEYWORD = re.compile(r"(?P<key>\bpassword\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^\s&;#]*)", re.IGNORECASE)


def redact(value: str) -> str:
    """`value` with every password it holds replaced by ***."""
    without_userinfo = _USERINFO.sub(lambda m: f"{m['scheme'] or ''}{m['user']}:{MASK}@", value)
    return _KEYWORD.sub(lambda m: f"{m['key']}{MASK}", without_userinfo)
