"""PLDM firmware update packages (DMTF DSP0267 1.0): build them, and read them back.

NVIDIA's `.fwpkg` files are PLDM packages: a package header (identifier, format revision 1, release
time, package version string), firmware device identification records (one per kind of device, with
the component image set name NVIDIA's tools read as the component's name, an IANA enterprise ID and
vendor-defined APSKU/ECSKU descriptors), component image information (identifier, version,
requested activation method, where the image lies) and a CRC-32 header checksum, then the images.
`build()` writes such a package; `parse()` reads one (what the simulated BMC does with an uploaded
package). The real nvfwupd (`nvfwupd/deps/fwpkg_unpack.py`) parses what `build()` writes.

parse() is linear in its input and bounded (counts and lengths are checked against the bytes there
are); it raises PldmError (a ValueError) naming what is wrong.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
import zlib
from dataclasses import dataclass, field

# PackageHeaderIdentifier of DSP0267 1.0.x, as fwpkg_unpack checks it.
HEADER_UUID_V1_0 = uuid.UUID(bytes=b"\xf0\x18\x87\x8c\xcb\x7d\x49\x43\x98\x00\xa0\x2f\x05\x9a\xca\x02")
FORMAT_REVISION = 1
STRING_ASCII = 1
NVIDIA_IANA = 5703  # IANA enterprise number of NVIDIA
CLASSIFICATION_FIRMWARE = 0x000A
DESCRIPTOR_IANA = 0x0001
DESCRIPTOR_VENDOR = 0xFFFF

# RequestedComponentActivationMethod bits (DSP0267 1.0 table 6).
ACTIVATION_BITS = {
    "automatic": 0, "self_contained": 1, "medium_specific_reset": 2, "system_reboot": 3,
    "dc_power_cycle": 4, "ac_power_cycle": 5,
}
MAX_RECORDS = 255
MAX_COMPONENTS = 1024
MAX_STRING = 255


class PldmError(ValueError):
    """The bytes are not a PLDM firmware package this simulator understands."""


@dataclass(frozen=True)
class Component:
    """One component image: `name` is the component image set name its device record carries."""

    name: str  # e.g. HMC, GPU_SXM, NVSwitch, ERoT, PCIeSwitch, FPGA, CPLD
    version: str
    identifier: int
    activation: tuple[str, ...] = ("ac_power_cycle",)
    sku: str | None = None  # hex without 0x: the APSKU (ECSKU for ERoT) vendor-defined descriptor
    image: bytes = b""
    options: int = 0


@dataclass
class Package:
    version: str  # PackageVersionString
    components: list[Component] = field(default_factory=list)
    release: tuple[int, int, int, int, int, int] = (2024, 10, 25, 12, 0, 0)
    header_size: int = 0
    sha256: str = ""


# --- build -------------------------------------------------------------------------------------

def _string(text: str, what: str) -> bytes:
    data = text.encode("ascii")
    if not data or len(data) > MAX_STRING:
        raise PldmError(f"PLDM {what} {text!r}: 1 to {MAX_STRING} ASCII characters")
    return data


def _timestamp104(release: tuple[int, int, int, int, int, int]) -> bytes:
    year, month, day, hour, minute, second = release
    # UTC offset (sint16), microseconds (uint24), seconds, minutes, hours, day, month, year (uint16), resolution
    return (struct.pack("<h", 0) + (0).to_bytes(3, "little") + bytes([second, minute, hour, day, month])
            + struct.pack("<H", year) + b"\x0f")


def _descriptors(comp: Component) -> tuple[int, bytes]:
    out = struct.pack("<HH", DESCRIPTOR_IANA, 4) + struct.pack("<I", NVIDIA_IANA)
    count = 1
    if comp.sku:
        title = b"ECSKU" if comp.name.lower() == "erot" else b"APSKU"
        data = bytes.fromhex(comp.sku)
        out += struct.pack("<HH", DESCRIPTOR_VENDOR, 2 + len(title) + len(data))
        out += bytes([STRING_ASCII, len(title)]) + title + data
        count += 1
    return count, out


def _activation_bits(names: tuple[str, ...]) -> int:
    bits = 0
    for name in names:
        if name not in ACTIVATION_BITS:
            raise PldmError(f"PLDM activation method {name!r}: one of {', '.join(ACTIVATION_BITS)}")
        bits |= 1 << ACTIVATION_BITS[name]
    return bits


def build(package: Package) -> bytes:
    """The bytes of a PLDM package: one device record and one component image per component."""
    comps = package.components
    if not comps or len(comps) > MAX_RECORDS:
        raise PldmError(f"a PLDM package holds 1 to {MAX_RECORDS} components here, not {len(comps)}")
    bitmap_bits = max(8, (len(comps) + 7) // 8 * 8)
    bitmap_bytes = bitmap_bits // 8
    version = _string(package.version, "package version string")

    records = b""
    for index, comp in enumerate(comps):
        name = _string(comp.name, "component image set name")
        count, desc = _descriptors(comp)
        body = struct.pack("<BIBBH", count, 0, STRING_ASCII, len(name), 0)
        body += (1 << index).to_bytes(bitmap_bytes, "little") + name + desc
        records += struct.pack("<H", 2 + len(body)) + body
    info_fixed = 2 + 2 + 4 + 2 + 2 + 4 + 4 + 1 + 1
    info_size = 2 + sum(info_fixed + len(_string(c.version, "component version string")) for c in comps)
    header_fixed = 16 + 1 + 2 + 13 + 2 + 1 + 1 + len(version)
    header_size = header_fixed + 1 + len(records) + info_size + 4

    images = [c.image or _image(package.version, c) for c in comps]
    offset = header_size
    info = struct.pack("<H", len(comps))
    for comp, image in zip(comps, images):
        cver = _string(comp.version, "component version string")
        info += struct.pack("<HHIHHIIBB", CLASSIFICATION_FIRMWARE, comp.identifier, 0xFFFFFFFF, comp.options,
                            _activation_bits(comp.activation), offset, len(image), STRING_ASCII, len(cver)) + cver
        offset += len(image)
    header = (HEADER_UUID_V1_0.bytes + struct.pack("<BH", FORMAT_REVISION, header_size) + _timestamp104(package.release)
              + struct.pack("<HBB", bitmap_bits, STRING_ASCII, len(version)) + version
              + bytes([len(comps)]) + records + info)
    header += struct.pack("<I", zlib.crc32(header))
    assert len(header) == header_size, (len(header), header_size)
    return header + b"".join(images)


def _image(package_version: str, comp: Component, size: int = 4096) -> bytes:
    """A deterministic stand-in for the component's signed image."""
    seed = hashlib.sha256(f"{package_version}/{comp.name}/{comp.version}/{comp.sku}".encode()).digest()
    out = bytearray()
    while len(out) < size:
        seed = hashlib.sha256(seed).digest()
        out += seed
    return bytes(out[:size])


# --- parse -------------------------------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise PldmError(f"PLDM package truncated: {what} needs {n} bytes at offset {self.pos}, "
                            f"the package has {len(self.data)}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]

    def text(self, n: int, what: str) -> str:
        raw = self.take(n, what).split(b"\x00")[0]
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError:
            raise PldmError(f"PLDM {what} is not ASCII") from None


def parse(data: bytes) -> Package:
    """Read a PLDM package (header, records, component images); raise PldmError on anything off."""
    r = _Reader(data)
    if r.take(16, "PackageHeaderIdentifier") != HEADER_UUID_V1_0.bytes:
        raise PldmError("not a PLDM firmware package: the PackageHeaderIdentifier is not DSP0267 1.0's")
    if r.u("B", "PackageHeaderFormatRevision") != FORMAT_REVISION:
        raise PldmError("PLDM PackageHeaderFormatRevision is not 1")
    header_size = r.u("H", "PackageHeaderSize")
    if header_size > len(data):
        raise PldmError(f"PLDM PackageHeaderSize {header_size} exceeds the package ({len(data)} bytes)")
    ts = r.take(13, "PackageReleaseDateTime")
    release = (ts[10] | ts[11] << 8, ts[9], ts[8], ts[7], ts[6], ts[5])
    bitmap_bits = r.u("H", "ComponentBitmapBitLength")
    if bitmap_bits == 0 or bitmap_bits % 8:
        raise PldmError(f"PLDM ComponentBitmapBitLength {bitmap_bits} is not a positive multiple of 8")
    r.u("B", "PackageVersionStringType")
    version = r.text(r.u("B", "PackageVersionStringLength"), "PackageVersionString")
    if not version:
        raise PldmError("PLDM PackageVersionString is empty")

    names: dict[int, tuple[str, str | None]] = {}
    for _ in range(r.u("B", "DeviceIDRecordCount")):
        start = r.pos
        length = r.u("H", "RecordLength")
        count = r.u("B", "DescriptorCount")
        r.u("I", "DeviceUpdateOptionFlags")
        r.u("B", "ComponentImageSetVersionStringType")
        name_len = r.u("B", "ComponentImageSetVersionStringLength")
        pkg_data_len = r.u("H", "FirmwareDevicePackageDataLength")
        applicable = int.from_bytes(r.take(bitmap_bits // 8, "ApplicableComponents"), "little")
        name = r.text(name_len, "ComponentImageSetVersionString")
        sku = None
        for _d in range(count):
            dtype = r.u("H", "DescriptorType")
            dlen = r.u("H", "DescriptorLength")
            body = r.take(dlen, "DescriptorData")
            if dtype == DESCRIPTOR_VENDOR and len(body) >= 2 and 2 + body[1] <= len(body):
                title = body[2:2 + body[1]].decode("ascii", "replace")
                if title in ("APSKU", "ECSKU"):
                    sku = body[2 + body[1]:].hex()
        r.take(pkg_data_len, "FirmwareDevicePackageData")
        if r.pos - start != length:
            raise PldmError(f"PLDM device record {name!r}: RecordLength {length} but {r.pos - start} bytes read")
        parts = name.split(",")
        bit = 0
        while applicable:  # each set bit once (not every bit of the bitmap: that is quadratic in the records)
            low = applicable & -applicable
            names[low.bit_length() - 1] = (parts[min(bit, len(parts) - 1)], sku)
            applicable ^= low
            bit += 1

    comp_count = r.u("H", "ComponentImageCount")
    if comp_count > MAX_COMPONENTS or comp_count > bitmap_bits:
        raise PldmError(f"PLDM ComponentImageCount {comp_count} exceeds the bitmap ({bitmap_bits} bits)")
    infos = []
    for _ in range(comp_count):
        r.u("H", "ComponentClassification")
        ident = r.u("H", "ComponentIdentifier")
        r.u("I", "ComponentComparisonStamp")
        options = r.u("H", "ComponentOptions")
        bits = r.u("H", "RequestedComponentActivationMethod")
        offset = r.u("I", "ComponentLocationOffset")
        size = r.u("I", "ComponentSize")
        r.u("B", "ComponentVersionStringType")
        cver = r.text(r.u("B", "ComponentVersionStringLength"), "ComponentVersionString")
        infos.append((ident, options, bits, offset, size, cver))
    crc_at = r.pos
    checksum = r.u("I", "PackageHeaderChecksum")
    if r.pos != header_size:
        raise PldmError(f"PLDM PackageHeaderSize {header_size} but the header ends at {r.pos}")
    if zlib.crc32(data[:crc_at]) != checksum:
        raise PldmError("PLDM PackageHeaderChecksum does not match the header (a corrupt package)")

    comps = []
    for index, (ident, options, bits, offset, size, cver) in enumerate(infos):
        if index not in names:
            raise PldmError(f"PLDM component {index} ({cver}) belongs to no device record")
        if offset < header_size or offset + size > len(data):
            raise PldmError(f"PLDM component {index}: image at {offset}+{size} lies outside the package ({len(data)} bytes)")
        name, sku = names[index]
        activation = tuple(k for k, b in ACTIVATION_BITS.items() if bits >> b & 1)
        comps.append(Component(name=name, version=cver, identifier=ident, activation=activation, sku=sku,
                               image=data[offset:offset + size], options=options))
    return Package(version=version, components=comps, release=release, header_size=header_size,
                   sha256=hashlib.sha256(data).hexdigest())
