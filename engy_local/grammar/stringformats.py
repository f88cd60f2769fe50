"""GBNF of the string formats a schema's grammar holds (`format`), each the
content between the quotes. Every string a rule allows is one the format's
definition accepts (RFC 3339 dates and times, RFC 4122 UUIDs, dotted IPv4
addresses, hostnames, and a plain mailbox for email), so a validator that
checks formats takes it; each allows the usual forms, not every legal one.

Dates are exact: the days of each month, February's 29th in leap years
only (divisible by 4, centuries by 400), no year 0000. Pure text.
"""

from __future__ import annotations

_HEX = "[0-9a-fA-F]"
# Years divisible by 4: the last two digits (not 00), or a century divisible by 4.
_BY_4 = '("0" [48] | [2468] [048] | [13579] [26])'
_LEAP = f'([0-9] [0-9] {_BY_4} | {_BY_4} "00")'
_YEAR = '("0" "0" "0" [1-9] | "0" "0" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3})'
_DAY_31 = '("0" [1-9] | [12] [0-9] | "3" [01])'
_DAY_30 = '("0" [1-9] | [12] [0-9] | "30")'
_DAY_28 = '("0" [1-9] | "1" [0-9] | "2" [0-8])'
_DATE = (
    f'({_YEAR} "-" (("0" [13578] | "1" [02]) "-" {_DAY_31}'
    f' | ("0" [469] | "11") "-" {_DAY_30}'
    f' | "02" "-" {_DAY_28}))'
    f' | ({_LEAP} "-02-29")'
)
_OFFSET = '([zZ] | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])'
_TIME = f'([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{{1,9}})? {_OFFSET}'
_OCTET = '("25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9])'
# A label starts with a letter (a name whose last label is all digits reads
# as an address), ends with a letter or digit, and is at most 60 characters.
_LABEL = "[a-zA-Z] ([a-zA-Z0-9-]{0,58} [a-zA-Z0-9])?"
_HOSTNAME = f'{_LABEL} ("." {_LABEL}){{0,3}}'
_LOCAL = '[a-zA-Z0-9_+-]{1,32} ("." [a-zA-Z0-9_+-]{1,32}){0,3}'

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"({_DATE}) [tT] ({_TIME})",
    "uuid": f'{_HEX}{{8}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{4}} "-" {_HEX}{{12}}',
    "ipv4": f'{_OCTET} "." {_OCTET} "." {_OCTET} "." {_OCTET}',
    "hostname": _HOSTNAME,
    "email": f'{_LOCAL} "@" {_LABEL} ("." {_LABEL}){{1,3}}',
}


def format_body(name: str) -> str | None:
    """The GBNF of a format's content, or None where it is not held."""
    return FORMATS.get(name)
