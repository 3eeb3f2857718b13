"""Checks the relay's macOS binaries without a Mac (run by infra/relay-dist.sh).

For every file (thin or fat) and every slice in it:
- the CPU type is the one its name promises (arm64, x86_64, or both for universal2);
- the minimum macOS (LC_BUILD_VERSION) is the one stated, and at most 12;
- every linked library is a system one (/usr/lib/, /System/Library/Frameworks/);
- arm64 slices carry a code signature (LC_CODE_SIGNATURE) whose CodeDirectory hashes match
  the slice's pages: macOS kills an arm64 binary with no signature or a stale one (a strip
  after the linker signed it would leave a stale one).

    python infra/check_macho.py --min-macos 11.0 FILE...
"""

import argparse
import hashlib
import struct
import sys

import lief

lief.logging.disable()

SYSTEM_PREFIXES = ("/usr/lib/", "/System/Library/Frameworks/")
CPU = {lief.MachO.Header.CPU_TYPE.ARM64: "arm64", lief.MachO.Header.CPU_TYPE.X86_64: "x86_64"}
FAT_MAGIC = 0xCAFEBABE
CS_SUPERBLOB = 0xFADE0CC0
CS_CODEDIRECTORY = 0xFADE0C02
HASHES = {1: hashlib.sha1, 2: hashlib.sha256}


def slices(data: bytes):
    """(offset, size) of each Mach-O in the file (one for a thin file)."""
    if struct.unpack_from(">I", data, 0)[0] != FAT_MAGIC:
        return [(0, len(data))]
    (n,) = struct.unpack_from(">I", data, 4)
    return [struct.unpack_from(">iiIII", data, 8 + 20 * i)[2:4] for i in range(n)]


def signature_problems(raw: bytes, dataoff: int, datasize: int) -> list:
    """Verifies the code pages of one slice against its CodeDirectory."""
    blob = raw[dataoff : dataoff + datasize]
    magic, _, count = struct.unpack_from(">III", blob, 0)
    if magic != CS_SUPERBLOB:
        return [f"signature: not a SuperBlob (magic {magic:#x})"]
    for i in range(count):
        _, off = struct.unpack_from(">II", blob, 12 + 8 * i)
        if struct.unpack_from(">I", blob, off)[0] != CS_CODEDIRECTORY:
            continue
        (hash_offset, _, _, n_code, code_limit) = struct.unpack_from(">IIIII", blob, off + 16)
        hash_size, hash_type, _, page_log = struct.unpack_from(">BBBB", blob, off + 36)
        page = 1 << page_log
        if hash_type not in HASHES:
            return [f"signature: unknown hash type {hash_type}"]
        bad = 0
        for p in range(n_code):
            want = blob[off + hash_offset + p * hash_size : off + hash_offset + (p + 1) * hash_size]
            got = HASHES[hash_type](raw[p * page : min((p + 1) * page, code_limit)]).digest()[:hash_size]
            bad += want != got
        if n_code != (code_limit + page - 1) // page:
            return [f"signature: {n_code} page hashes for a {code_limit}-byte code limit"]
        return [f"signature: {bad} of {n_code} page hashes do not match the file"] if bad else []
    return ["signature: no CodeDirectory"]


def check(path: str, min_macos: str) -> list:
    name = path.replace("\\", "/")
    want = {"arm64", "x86_64"} if "universal2" in name else {"arm64"} if "aarch64" in name else {"x86_64"}
    data = open(path, "rb").read()
    problems, seen = [], set()
    for off, size in slices(data):
        raw = data[off : off + size]
        b = lief.MachO.parse(list(raw)).at(0)
        cpu = CPU.get(b.header.cpu_type, str(b.header.cpu_type))
        seen.add(cpu)
        where = f"{path} [{cpu}]"
        if not b.has_build_version:
            problems.append(f"{where}: no LC_BUILD_VERSION")
        else:
            minos = ".".join(str(x) for x in b.build_version.minos)
            print(f"{where}: minimum macOS {minos}, platform {b.build_version.platform}")
            if tuple(b.build_version.minos[:2]) != tuple(int(x) for x in min_macos.split(".")[:2]):
                problems.append(f"{where}: minimum macOS {minos}, not {min_macos}")
            if b.build_version.minos[0] > 12:
                problems.append(f"{where}: minimum macOS {minos} is above 12")
        for lib in b.libraries:
            print(f"{where}: links {lib.name}")
            if not lib.name.startswith(SYSTEM_PREFIXES):
                problems.append(f"{where}: links a non-system library {lib.name}")
        if cpu == "arm64":
            if not b.has_code_signature:
                problems.append(f"{where}: no LC_CODE_SIGNATURE (macOS kills unsigned arm64 binaries)")
            else:
                cs = b.code_signature
                found = signature_problems(raw, cs.data_offset, cs.data_size)
                problems += [f"{where}: {p}" for p in found]
                if not found:
                    print(f"{where}: ad-hoc signature, every page hash matches")
    if seen != want:
        problems.append(f"{path}: slices {sorted(seen)}, expected {sorted(want)}")
    return problems


def self_test(path: str, min_macos: str) -> list:
    """The broken variant: the same file with one byte of code changed after signing must be
    caught by the signature check."""
    import os
    import tempfile

    data = bytearray(open(path, "rb").read())
    off, _ = slices(bytes(data))[0]
    data[off + 0x4000 + 17] ^= 0xFF
    with tempfile.TemporaryDirectory() as d:
        broken = os.path.join(d, os.path.basename(os.path.dirname(os.path.dirname(path))) + "-relay")
        open(broken, "wb").write(data)
        caught = [p for p in check(broken, min_macos) if "page hashes do not match" in p]
    return [] if caught else [f"{path}: a changed code page was not caught by the signature check"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-macos", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    arm = [f for f in args.files if "aarch64" in f]
    problems = [p for f in arm[:1] for p in self_test(f, args.min_macos)]
    if arm and not problems:
        print(f"self-test: a changed code page of {arm[0]} is caught")
    problems += [p for f in args.files for p in check(f, args.min_macos)]
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    print(f"check_macho: {len(args.files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
