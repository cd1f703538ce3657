# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    # What the report-writing modules (fleet_report, validation_report) share.
    DOCUMENTATION = r"""
options:
  dest:
    description: Folder to write the report files to. Created when missing.
    type: path
    required: true
  generated_at:
    description: Time stamp printed in the report, for example the output of the C(now) Jinja2 function.
    type: str
attributes:
  check_mode:
    support: full
    details:
      - In check mode the report is computed and returned, and no file is written.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Files are only rewritten when their content changes; with O(generated_at) set to the current time the content always changes.
"""
