# Copyright (c) gpufleet maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVIDIA CUDA / driver / GPU architecture compatibility data (private: may change without notice).

Only data lives here; the rules that read it are in _compat.py. Every table names its source
and the date it was taken. Versions are strings exactly as NVIDIA prints them.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# Table 3 "CUDA Toolkit and Corresponding Driver Versions" (the toolkit driver: the driver that
# a toolkit release needs without any compatibility package).
# Source: CUDA Toolkit 13.2 Update 2 Release Notes, section 2.2 "CUDA Driver",
# https://docs.nvidia.com/cuda/archive/13.2.2/cuda-toolkit-release-notes/index.html
# Transcribed 2026 from the capture kept as
# shared/fixtures/real/cuda-driver/cuda_13.2u2_release_notes_Table2_Table3_CAPTURE.txt;
# tests/unit/plugins/module_utils/test_compat.py checks every row against that capture.
# Columns: row label as printed in Table 3, toolkit version (what `nvcc`/release names call it),
# minimum Linux x86_64 driver, minimum Windows x86_64 driver (None where the table says N/A:
# from CUDA 13 the Windows driver is no longer bundled), release kind:
#   "ga"     the first release of that major.minor: what a bare "12.4" means;
#   "update" a later release of that major.minor, named by its full version;
#   "rc"     a release candidate (11.0.1 only);
#   "ga+"    "general release, and updates": the row covers every patch of that major.minor.
# ---------------------------------------------------------------------------------------------
TOOLKIT_DRIVER_ROWS = (
    ("CUDA 13.2 Update 2", "13.2.2", "595.71.05", None, "update"),
    ("CUDA 13.2 Update 1", "13.2.1", "595.58.03", None, "update"),
    ("CUDA 13.2 GA", "13.2.0", "595.45.04", None, "ga"),
    ("CUDA 13.1 Update 1", "13.1.1", "590.48.01", None, "update"),
    ("CUDA 13.1 GA", "13.1.0", "590.44.01", None, "ga"),
    ("CUDA 13.0 Update 2", "13.0.2", "580.95.05", None, "update"),
    ("CUDA 13.0 Update 1", "13.0.1", "580.82.07", None, "update"),
    ("CUDA 13.0 GA", "13.0.0", "580.65.06", None, "ga"),
    ("CUDA 12.9 Update 1", "12.9.1", "575.57.08", "576.57", "update"),
    ("CUDA 12.9 GA", "12.9.0", "575.51.03", "576.02", "ga"),
    ("CUDA 12.8 Update 1", "12.8.1", "570.124.06", "572.61", "update"),
    ("CUDA 12.8 GA", "12.8.0", "570.26", "570.65", "ga"),
    ("CUDA 12.6 Update 3", "12.6.3", "560.35.05", "561.17", "update"),
    ("CUDA 12.6 Update 2", "12.6.2", "560.35.03", "560.94", "update"),
    ("CUDA 12.6 Update 1", "12.6.1", "560.35.03", "560.94", "update"),
    ("CUDA 12.6 GA", "12.6.0", "560.28.03", "560.76", "ga"),
    ("CUDA 12.5 Update 1", "12.5.1", "555.42.06", "555.85", "update"),
    ("CUDA 12.5 GA", "12.5.0", "555.42.02", "555.85", "ga"),
    ("CUDA 12.4 Update 1", "12.4.1", "550.54.15", "551.78", "update"),
    ("CUDA 12.4 GA", "12.4.0", "550.54.14", "551.61", "ga"),
    ("CUDA 12.3 Update 1", "12.3.1", "545.23.08", "546.12", "update"),
    ("CUDA 12.3 GA", "12.3.0", "545.23.06", "545.84", "ga"),
    ("CUDA 12.2 Update 2", "12.2.2", "535.104.05", "537.13", "update"),
    ("CUDA 12.2 Update 1", "12.2.1", "535.86.09", "536.67", "update"),
    ("CUDA 12.2 GA", "12.2.0", "535.54.03", "536.25", "ga"),
    ("CUDA 12.1 Update 1", "12.1.1", "530.30.02", "531.14", "update"),
    ("CUDA 12.1 GA", "12.1.0", "530.30.02", "531.14", "ga"),
    ("CUDA 12.0 Update 1", "12.0.1", "525.85.12", "528.33", "update"),
    ("CUDA 12.0 GA", "12.0.0", "525.60.13", "527.41", "ga"),
    ("CUDA 11.8 GA", "11.8.0", "520.61.05", "520.06", "ga"),
    ("CUDA 11.7 Update 1", "11.7.1", "515.48.07", "516.31", "update"),
    ("CUDA 11.7 GA", "11.7.0", "515.43.04", "516.01", "ga"),
    ("CUDA 11.6 Update 2", "11.6.2", "510.47.03", "511.65", "update"),
    ("CUDA 11.6 Update 1", "11.6.1", "510.47.03", "511.65", "update"),
    ("CUDA 11.6 GA", "11.6.0", "510.39.01", "511.23", "ga"),
    ("CUDA 11.5 Update 2", "11.5.2", "495.29.05", "496.13", "update"),
    ("CUDA 11.5 Update 1", "11.5.1", "495.29.05", "496.13", "update"),
    ("CUDA 11.5 GA", "11.5.0", "495.29.05", "496.04", "ga"),
    ("CUDA 11.4 Update 4", "11.4.4", "470.82.01", "472.50", "update"),
    ("CUDA 11.4 Update 3", "11.4.3", "470.82.01", "472.50", "update"),
    ("CUDA 11.4 Update 2", "11.4.2", "470.57.02", "471.41", "update"),
    ("CUDA 11.4 Update 1", "11.4.1", "470.57.02", "471.41", "update"),
    ("CUDA 11.4.0 GA", "11.4.0", "470.42.01", "471.11", "ga"),
    ("CUDA 11.3.1 Update 1", "11.3.1", "465.19.01", "465.89", "update"),
    ("CUDA 11.3.0 GA", "11.3.0", "465.19.01", "465.89", "ga"),
    ("CUDA 11.2.2 Update 2", "11.2.2", "460.32.03", "461.33", "update"),
    ("CUDA 11.2.1 Update 1", "11.2.1", "460.32.03", "461.09", "update"),
    ("CUDA 11.2.0 GA", "11.2.0", "460.27.03", "460.82", "ga"),
    ("CUDA 11.1.1 Update 1", "11.1.1", "455.32", "456.81", "update"),
    ("CUDA 11.1 GA", "11.1.0", "455.23", "456.38", "ga"),
    ("CUDA 11.0.3 Update 1", "11.0.3", "450.51.06", "451.82", "update"),
    ("CUDA 11.0.2 GA", "11.0.2", "450.51.05", "451.48", "ga"),
    ("CUDA 11.0.1 RC", "11.0.1", "450.36.06", "451.22", "rc"),
    ("CUDA 10.2.89", "10.2.89", "440.33", "441.22", "ga"),
    ("CUDA 10.1 (10.1.105 general release, and updates)", "10.1.105", "418.39", "418.96", "ga+"),
    ("CUDA 10.0.130", "10.0.130", "410.48", "411.31", "ga"),
    ("CUDA 9.2 (9.2.148 Update 1)", "9.2.148", "396.37", "398.26", "update"),
    ("CUDA 9.2 (9.2.88)", "9.2.88", "396.26", "397.44", "ga"),
    ("CUDA 9.1 (9.1.85)", "9.1.85", "390.46", "391.29", "ga"),
    ("CUDA 9.0 (9.0.76)", "9.0.76", "384.81", "385.54", "ga"),
    ("CUDA 8.0 (8.0.61 GA2)", "8.0.61", "375.26", "376.51", "update"),
    ("CUDA 8.0 (8.0.44)", "8.0.44", "367.48", "369.30", "ga"),
    ("CUDA 7.5 (7.5.16)", "7.5.16", "352.31", "353.66", "ga"),
    ("CUDA 7.0 (7.0.28)", "7.0.28", "346.46", "347.62", "ga"),
)

# ---------------------------------------------------------------------------------------------
# Table 2 "CUDA Toolkit and Minimum Required Driver Version for CUDA Minor Version
# Compatibility". Same source and date as Table 3 above. The table has one Min/Max pair for
# both operating systems. Max is where the next major family's drivers begin: a newer driver
# still runs the family (drivers are backward compatible), so it is kept as data, not used
# as an upper limit.
# Columns: CUDA major family as printed, minimum driver, Max column (None where N/A).
# ---------------------------------------------------------------------------------------------
MINOR_VERSION_COMPAT_ROWS = (
    ("13.x", "580", None),
    ("12.x", "525", "580"),
    ("11.x", "450", "525"),
)

# Footnote *** of the same table: "CUDA 11.0 was released with an earlier driver version, but by
# upgrading to Tesla Recommended Drivers 450.80.02 (Linux) / 452.39 (Windows), minor version
# compatibility is possible across the CUDA 11.x family of toolkits." It refines the 11.x row.
MINOR_VERSION_COMPAT_FOOTNOTE = {
    11: {"linux": "450.80.02", "windows": "452.39"},
}

# ---------------------------------------------------------------------------------------------
# Driver branches and their lifecycle, as of 2026.
# Sources: NVIDIA Data Center Drivers, "Driver Lifecycle" and "Supported Drivers and CUDA
# Toolkit Versions" (https://docs.nvidia.com/datacenter/tesla/drivers/ , editions v580 of
# Aug 2025, 615 and 620 of 2026); "NVIDIA CUDA and Drivers Support" RN-08625-001 v02, March 2021
# (R418..R460); earlier editions of the same page for R470..R550 (dates from memory of those
# editions where no copy was at hand: R470, R510, R515, R525, R550).
# The v580 edition says: "All other previous driver branches not listed (such as R575, R565,
# R560, R550, R525, R515, R510, R495, R465, R460, R455, R450, R440, R418, R410) are end of
# life"; those carry declared_eol=True whether or not a date is known. The 620 edition says New
# Feature Branches "are short-lived and do not have an end-of-life date": None unless a page
# gave one (R610: August 2026 in the 615 edition). Branches from before the 2019 lifecycle have
# no type. end_of_life is the month NVIDIA states, "YYYY-MM" (NVIDIA gives months, not days).
# Columns: branch number, type ("lts", "production", "new feature", "developer" or None),
# end_of_life ("YYYY-MM" or None), declared_eol.
# ---------------------------------------------------------------------------------------------
BRANCH_LIFECYCLE = (
    (346, None, None, True),
    (352, None, None, True),
    (361, None, None, True),
    (367, None, None, True),
    (375, None, None, True),
    (384, None, None, True),
    (387, None, None, True),
    (390, None, None, True),
    (396, None, None, True),
    (410, None, None, True),
    (418, "lts", "2022-03", True),
    (430, None, None, True),
    (435, None, None, True),
    (440, "new feature", "2020-11", True),
    (450, "lts", "2023-07", True),
    (455, "developer", None, True),
    (460, "production", "2022-01", True),
    (465, "new feature", None, True),
    (470, "lts", "2024-07", False),
    (495, "new feature", None, True),
    (510, "production", "2023-01", True),
    (515, "production", "2023-05", True),
    (520, "new feature", None, False),
    (525, "production", "2023-11", True),
    (530, "new feature", None, False),
    (535, "lts", "2026-06", False),
    (545, "new feature", None, False),
    (550, "production", "2025-02", True),
    (555, "new feature", None, False),
    (560, "new feature", None, True),
    (565, "new feature", None, True),
    (570, "production", "2026-02", False),
    (575, "new feature", None, True),
    (580, "lts", "2028-06", False),
    (590, "new feature", None, False),
    (595, "production", "2027-03", False),
    (610, "new feature", "2026-08", False),
    (615, "new feature", None, False),
    (620, "lts", "2029-09", False),
)

# Windows drivers of a branch are numbered a little above it (R570: 570.65, 572.61; R535:
# 536.25, 537.13): a version belongs to the highest known branch at most this far below it.
# Table 3's Windows column (every row) stays inside this window; the tests check it.
BRANCH_NUMBER_WINDOW = 5

# ---------------------------------------------------------------------------------------------
# Compute capability -> architecture, and the first CUDA toolkit that builds for it.
# Source: NVIDIA Data Center Drivers, "CUDA Toolkit, Driver, and Architecture Matrix"
# (https://docs.nvidia.com/datacenter/tesla/drivers/cuda-toolkit-driver-and-architecture-matrix.html,
# v580 edition, Aug 2025), refined per capability from the CUDA release notes that added each
# target: sm_86 in CUDA 11.1, sm_87 in 11.4, sm_89/sm_90 in 11.8, sm_100/sm_120 in 12.8,
# sm_103/sm_121 in 12.9, sm_110 (Thor, renumbered from 10.1) in 13.0. Taken 2026.
# ---------------------------------------------------------------------------------------------
COMPUTE_CAPABILITIES = {
    # capability: (architecture, first CUDA toolkit major.minor)
    "3.0": ("Kepler", "6.0"),
    "3.2": ("Kepler", "6.0"),
    "3.5": ("Kepler", "6.0"),
    "3.7": ("Kepler", "6.0"),
    "5.0": ("Maxwell", "6.5"),
    "5.2": ("Maxwell", "6.5"),
    "5.3": ("Maxwell", "6.5"),
    "6.0": ("Pascal", "8.0"),
    "6.1": ("Pascal", "8.0"),
    "6.2": ("Pascal", "8.0"),
    "7.0": ("Volta", "9.0"),
    "7.2": ("Volta", "10.0"),
    "7.5": ("Turing", "10.0"),
    "8.0": ("Ampere", "11.0"),
    "8.6": ("Ampere", "11.1"),
    "8.7": ("Ampere", "11.4"),
    "8.9": ("Ada Lovelace", "11.8"),
    "9.0": ("Hopper", "11.8"),
    "10.0": ("Blackwell", "12.8"),
    "10.3": ("Blackwell", "12.9"),
    "11.0": ("Blackwell", "13.0"),
    "12.0": ("Blackwell", "12.8"),
    "12.1": ("Blackwell", "12.9"),
}

# Lowest compute capability each CUDA major release builds for.
# Sources: CUDA 13.0 release notes ("support for Maxwell, Pascal and Volta removed"; offline
# compilation for compute capability 7.5 and newer); CUDA 12.0 release notes (Kepler removed,
# 5.0 minimum); CUDA 11.0 release notes (3.0 removed, 3.5 minimum); the architecture matrix
# above ("Last CUDA Toolkit Support": Kepler 3.0/3.2 CUDA 10, 3.5/3.7 CUDA 11.x, Maxwell/Pascal/
# Volta CUDA 12.x). Fermi (2.x) is outside this data. Taken 2026.
CUDA_MAJOR_MIN_COMPUTE_CAPABILITY = {
    13: "7.5",
    12: "5.0",
    11: "3.5",
    10: "3.0",
    9: "3.0",
    8: "3.0",
    7: "3.0",
}

# ---------------------------------------------------------------------------------------------
# Which driver branches drive each architecture: (first branch, last branch), None = open.
# Sources: the architecture matrix above ("Last Driver Support": Kepler R470; Maxwell, Pascal,
# Volta R580); NVIDIA Unix driver deprecation notice ("The release 580 series will be the last
# to support GPUs based on the Maxwell, Pascal, and Volta architectures"); first branch = the
# branch of the Table 3 driver of the first toolkit that builds for the architecture (Volta:
# CUDA 9.0 / 384.81; Turing: 10.0 / 410.48; Ampere: 11.0 / 450.51.05, A100; Ada and Hopper:
# 11.8 / 520.61.05 (NVIDIA AI Enterprise 2.3 shipped H100 support on 520.61.05; R525 was the
# first production branch for them); Blackwell: 12.8 / 570.26, B200). Kepler and Maxwell
# predate every branch in this data (None); Pascal: CUDA 8.0 / 367.48. Single boards can need a
# later branch than their architecture (see docs/compatibility.md). Taken 2026.
# ---------------------------------------------------------------------------------------------
ARCHITECTURE_DRIVER_BRANCHES = {
    "Kepler": (None, 470),
    "Maxwell": (None, 580),
    "Pascal": (367, 580),
    "Volta": (384, 580),
    "Turing": (410, None),
    "Ampere": (450, None),
    "Ada Lovelace": (520, None),
    "Hopper": (520, None),
    "Blackwell": (570, None),
}

# ---------------------------------------------------------------------------------------------
# GPU product names, as nvidia-smi prints them (-L, -q "Product Name", -q -x <product_name>,
# --query-gpu=name), to compute capability.
# Sources: NVIDIA "CUDA GPUs - Compute Capability" (https://developer.nvidia.com/cuda-gpus),
# names as seen in the real outputs under shared/fixtures/real (taken 2026).
# Each pattern is a regular expression matched at the start of the name after it has been
# lower-cased, its spaces collapsed and a leading "NVIDIA " removed; \b keeps "a10" from
# matching "a100". The first match wins, so a more specific pattern comes first.
# ---------------------------------------------------------------------------------------------
GPU_NAME_PATTERNS = (
    # Blackwell
    (r"(gb|b)300\b", "10.3"),
    (r"(gb|b)200\b", "10.0"),
    (r"b100\b", "10.0"),
    (r"gb10\b", "12.1"),
    (r"rtx pro \d+ blackwell\b", "12.0"),
    (r"geforce rtx 50\d0\b", "12.0"),
    # Hopper
    (r"gh200\b", "9.0"),
    (r"h(100|200|800|20)\b", "9.0"),
    # Ada Lovelace
    (r"l(40s|40|20|4)\b", "8.9"),
    (r"rtx \d+ (sff )?ada generation\b", "8.9"),
    (r"geforce rtx 40\d0\b", "8.9"),
    # Ampere
    (r"a(100|800|30)\b", "8.0"),
    (r"a(10g|10m|10|16|2|40)\b", "8.6"),
    (r"rtx a\d+\b", "8.6"),
    (r"geforce rtx 30\d0\b", "8.6"),
    # Turing
    (r"(tesla )?t4\b", "7.5"),
    (r"t(400|600|1000|1200)\b", "7.5"),
    (r"quadro (rtx \d+|t\d+)\b", "7.5"),
    (r"titan rtx\b", "7.5"),
    (r"geforce rtx 20\d0\b", "7.5"),
    (r"geforce gtx 16\d0\b", "7.5"),
    # Volta
    (r"(tesla )?v100\b", "7.0"),
    (r"(quadro )?gv100\b", "7.0"),
    (r"titan v\b", "7.0"),
    # Pascal
    (r"(tesla )?p100\b", "6.0"),
    (r"(quadro )?gp100\b", "6.0"),
    (r"(tesla )?p(4|6|40)\b", "6.1"),
    (r"quadro p\d+\b", "6.1"),
    (r"geforce gtx 10\d0\b", "6.1"),
    (r"titan xp?\b", "6.1"),
    # Maxwell
    (r"geforce gtx titan x\b", "5.2"),
    (r"(tesla )?m(4|6|40|60)\b", "5.2"),
    (r"(tesla )?m10\b", "5.0"),
    (r"geforce gtx 9[5-8]0\b", "5.2"),
    (r"geforce gtx 750\b", "5.0"),
    (r"quadro m\d+\b", "5.2"),
    # Kepler
    (r"(tesla )?k80\b", "3.7"),
    (r"(tesla )?k(20x|20|40)\b", "3.5"),
    (r"(tesla )?k10\b", "3.0"),
)
