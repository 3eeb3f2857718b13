"""Tests infra/check_macho.py on real Mach-O files, without a Mac: zig (from the pinned ziglang
wheel) builds a hello world for arm64 and x86_64 macOS 11, a small fat writer joins them into a
universal2 file, and each of those must pass while each broken variant below must be caught.

    python infra/check_macho_test.py     (with the venv of infra/requirements-dist.txt)

zig's Mach-O linker signs arm64 output ad hoc by itself, as lld and ld64 do (it leaves x86_64
unsigned, which check_macho allows); the test fails, saying so, if a zig ever stops doing it.
"""

import contextlib
import hashlib
import importlib.util
import io
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_macho", os.path.join(HERE, "check_macho.py"))
check_macho = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_macho)
lief = check_macho.lief

MIN_MACOS = "11.0"
HELLO = '#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n'


def zig_cc(target: str, src: str, out: str) -> bytes:
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", target, "-O2", "-o", out, src]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {run.returncode}:\n{run.stderr}")
    return open(out, "rb").read()


def universal(thin: list) -> bytes:
    """A fat file of (Mach-O bytes, log2 alignment) pairs, in that order: a big-endian fat_header
    and fat_arch per slice, each slice at the next multiple of 2^align (as lipo lays them out)."""
    header = struct.pack(">II", check_macho.FAT_MAGIC, len(thin))
    arches, placed, end = b"", [], 8 + 20 * len(thin)
    for data, align in thin:
        off = -(-end // (1 << align)) << align
        cputype, cpusubtype = struct.unpack_from("<II", data, 4)
        arches += struct.pack(">IIIII", cputype, cpusubtype, off, len(data), align)
        placed.append((off, data))
        end = off + len(data)
    out = bytearray(end)
    out[: len(header) + len(arches)] = header + arches
    for off, data in placed:
        out[off : off + len(data)] = data
    return bytes(out)


def code_directory(data: bytes) -> tuple:
    """(file offset of the first CodeDirectory, LC_CODE_SIGNATURE dataoff) of a thin Mach-O."""
    cs = lief.MachO.parse(list(data)).at(0).code_signature
    _, off = struct.unpack_from(">II", data, cs.data_offset + 12)  # the SuperBlob's first index
    return cs.data_offset + off, cs.data_offset


def short_code_limit(data: bytes) -> bytes:
    """Signed again by hand one page short of the signature, page hashes consistent: only the
    codeLimit check can tell."""
    out = bytearray(data)
    cd, _ = code_directory(data)
    hash_offset, _, _, n_code, limit = struct.unpack_from(">5I", out, cd + 16)
    hash_size, _, _, page_log = struct.unpack_from(">4B", out, cd + 36)
    page = 1 << page_log
    limit -= page
    n_code = -(-limit // page)
    struct.pack_into(">II", out, cd + 28, n_code, limit)
    last = n_code - 1
    digest = hashlib.sha256(bytes(out[last * page : limit])).digest()[:hash_size]
    out[cd + hash_offset + last * hash_size : cd + hash_offset + n_code * hash_size] = digest
    return bytes(out)


def set_field(data: bytes, at: int, change) -> bytes:
    """The file with the CodeDirectory's big-endian u32 at offset `at` replaced by change(it)."""
    out = bytearray(data)
    cd, _ = code_directory(data)
    (value,) = struct.unpack_from(">I", out, cd + at)
    struct.pack_into(">I", out, cd + at, change(value))
    return bytes(out)


def flip_code_byte(data: bytes) -> bytes:
    out = bytearray(data)
    out[lief.MachO.parse(list(data)).at(0).get_section("__text").offset + 5] ^= 0xFF
    return bytes(out)


def without_uuid(data: bytes) -> bytes:
    """A thin 64-bit Mach-O whose LC_UUID (cmd 0x1b) is turned into a command nobody knows."""
    out = bytearray(data)
    ncmds = struct.unpack_from("<I", out, 16)[0]
    at = 32  # mach_header_64
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", out, at)
        if cmd == 0x1B:
            struct.pack_into("<I", out, at, 0x7A)
            return bytes(out)
        at += size
    sys.exit("FAIL: the build has no LC_UUID to remove")


def problems_of(path: str, expect: str = "adhoc") -> tuple:
    """check_macho.check's problems and what it printed (kept out of this test's own output)."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        found = check_macho.check(path, MIN_MACOS, expect)
    return found, printed.getvalue()


def main() -> int:
    started = time.monotonic()
    failures, cases = [], []
    with tempfile.TemporaryDirectory(prefix="check_macho_test-") as d:
        src = os.path.join(d, "hello.c")
        open(src, "w").write(HELLO)
        arm = zig_cc("aarch64-macos.11.0", src, os.path.join(d, "hello-aarch64"))
        x86 = zig_cc("x86_64-macos.11.0", src, os.path.join(d, "hello-x86_64"))
        if not lief.MachO.parse(list(arm)).at(0).has_code_signature:
            sys.exit("FAIL: zig did not sign the arm64 build (no LC_CODE_SIGNATURE): sign it otherwise")
        fat = universal([(x86, 12), (arm, 14)])
        open(os.path.join(d, "hello-universal2"), "wb").write(fat)

        def case(label: str, name: str, data: bytes, want: str = "", expect: str = "adhoc"):
            """The file must pass (want empty) or be reported with a problem containing want."""
            cases.append(label)
            path = os.path.join(d, f"case{len(cases)}", name)  # the name alone sets the slices wanted
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "wb").write(data)
            found, printed = problems_of(path, expect)
            if want:
                hit = [p for p in found if want in p]
                ok = bool(hit)
                more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
                detail = f"caught: {hit[0].split(': ', 1)[1]}{more}" if ok else f"NOT caught: {found}"
            else:
                ok = not found
                detail = "0 problems" if ok else f"{len(found)} problem(s): {found}"
            print(f"{'ok  ' if ok else 'FAIL'} {label}: {detail}")
            if not ok:
                failures.append(label)
                print(printed, end="")

        case("aarch64 as built", "hello-aarch64", arm)
        case("x86_64 as built", "hello-x86_64", x86)
        case("universal2 as lipo lays it out", "hello-universal2", fat)
        # cargo-zigbuild's fat writer (the fat-macho crate) gives every slice the largest alignment
        zigbuild = universal([(x86, 14), (arm, 14)])
        case("universal2 as cargo-zigbuild lays it out", "hello-universal2", zigbuild)
        case("codeLimit one page short", "hello-aarch64", short_code_limit(arm), "codeLimit")
        # flags is the CodeDirectory's u32 at 12, version at 8 (cs_blobs.h)
        no_adhoc = set_field(arm, 12, lambda f: f & ~check_macho.CS_ADHOC)
        case("CS_ADHOC cleared", "hello-aarch64", no_adhoc, "lack CS_ADHOC")
        old_version = set_field(arm, 8, lambda v: 0x20200)
        case("version 0x20200", "hello-aarch64", old_version, "below CS_SUPPORTSEXECSEG")
        misplaced = universal([(arm, 12), (x86, 12)])  # arm64 at 0x1000: 4 KiB, not 16 KiB
        case("arm64 slice 4 KiB-aligned", "hello-universal2", misplaced, "not a multiple of 2^14")
        mislabelled = bytearray(fat)  # arm64 where it belongs, its fat_arch (the 2nd) saying 2^12
        struct.pack_into(">I", mislabelled, 8 + 20 + 16, 12)
        case("arm64 fat_arch align 12", "hello-universal2", bytes(mislabelled), "align is 2^12, not 2^14")
        case("a code byte flipped", "hello-aarch64", flip_code_byte(arm), "page hashes do not match")
        case("LC_UUID removed", "hello-aarch64", without_uuid(arm), "no LC_UUID")
        case("ad-hoc build checked as developer-id", "hello-aarch64", arm, "have CS_ADHOC", "developer-id")
    took = time.monotonic() - started
    print(f"check_macho_test: {len(cases) - len(failures)} passed, {len(failures)} failed ({took:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
