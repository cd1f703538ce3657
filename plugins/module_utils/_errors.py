# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one base error of the collection's module utilities (private: may change without notice).

Everything inside raises a :class:`GpufleetError` (or a subclass) with a message that says what
was wrong and what to do; only a module turns it into ``fail_json(**exc.fail_kwargs())``.
Parsers raise ``_parsers._common.ParseError`` (a ValueError: parsers import nothing above them);
:func:`fail_kwargs` turns either into the keyword arguments of ``fail_json``.
"""

from __future__ import annotations


class GpufleetError(Exception):
    """A refusal or a failure with a message for the user and details for ``fail_json``.

    ``details`` are extra return values (``cmd``, ``rc``, ``stdout``, ``stderr``, ``path``...);
    ``None`` values are kept so that every error of one kind has the same keys.
    """

    def __init__(self, msg, **details):
        super().__init__(msg)
        self.msg = msg
        self.details = details

    def fail_kwargs(self):
        """Keyword arguments for ``module.fail_json``."""
        return dict(self.details, msg=self.msg)


def fail_kwargs(exc):
    """``fail_json`` keyword arguments for a GpufleetError or any other exception (a parser's ParseError)."""
    if isinstance(exc, GpufleetError):
        return exc.fail_kwargs()
    return {"msg": str(exc)}
