"""Checks the relay's macOS binaries without a Mac (run by infra/relay-dist.sh).

For every file (thin or fat) and every slice in it:
- the CPU type is the one its name promises (arm64, x86_64, or both for universal2);
- the minimum macOS (LC_BUILD_VERSION) is the one stated, and at most 12;
- it has an LC_UUID (macOS's local network privacy keys its decision on it, TN3179);
- every linked library is a system one (/usr/lib/, /System/Library/Frameworks/);
- arm64 slices carry a code signature (LC_CODE_SIGNATURE) whose CodeDirectory hashes match
  the slice's pages: macOS kills an arm64 binary with no signature or a stale one (a strip
  after the linker signed it would leave a stale one), whose codeLimit reaches the signature
  itself, whose version has the exec-segment fields, and whose flags are those of the signer
  named by --expect (adhoc: the linker's ad-hoc signature; developer-id: codesign's, with the
  hardened runtime);
- in a universal file, every slice starts on its architecture's page (16 KiB for arm64).

    python infra/check_macho.py --min-macos 11.0 [--expect adhoc|developer-id] FILE...

Sources: xnu osfmk/kern/cs_blobs.h (the CodeDirectory layout and its constants);
llvm lld/MachO/SyntheticSections.cpp, CodeSignatureSection::writeTo (what a linker's ad-hoc
signature holds); llvm lib/Object/MachOUniversalWriter.cpp, calculateAlignment (slice alignment).
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
# CodeDirectory flags and versions, from xnu osfmk/kern/cs_blobs.h.
CS_ADHOC = 0x2
CS_RUNTIME = 0x10000  # hardened runtime, which notarization requires
CS_LINKER_SIGNED = 0x20000  # "automatically signed by the linker"
CS_SUPPORTSEXECSEG = 0x20400  # adds execSegBase/Limit/Flags; lld and ld64 write this version
FLAG_NAMES = {CS_ADHOC: "CS_ADHOC", CS_RUNTIME: "CS_RUNTIME", CS_LINKER_SIGNED: "CS_LINKER_SIGNED"}
# The flags each signer must set (True) or leave clear (False). lld signs ad hoc with
# CS_ADHOC | CS_LINKER_SIGNED (SyntheticSections.cpp, CodeSignatureSection::writeTo), as ld64
# does; codesign's Developer ID signature has neither, and CS_RUNTIME, the hardened runtime that
# notarization requires. (CS_LINKER_SIGNED is printed, not required, for ad-hoc: `codesign -s -`
# signs ad hoc without it.)
EXPECT_FLAGS = {
    "adhoc": {CS_ADHOC: True},
    "developer-id": {CS_ADHOC: False, CS_LINKER_SIGNED: False, CS_RUNTIME: True},
}
# log2 of each architecture's page, which a slice of a universal file must start on: the values
# llvm-lipo writes in fat_arch.align (MachOUniversalWriter.cpp, calculateAlignment).
FAT_PAGE = {"arm64": 14, "x86_64": 12}


def slices(data: bytes):
    """(offset, size, fat_arch align) of each Mach-O in the file (one, align None, if thin)."""
    if struct.unpack_from(">I", data, 0)[0] != FAT_MAGIC:
        return [(0, len(data), None)]
    (n,) = struct.unpack_from(">I", data, 4)
    return [struct.unpack_from(">iiIII", data, 8 + 20 * i)[2:5] for i in range(n)]


def signature_problems(raw: bytes, dataoff: int, datasize: int, expect: str = "adhoc"):
    """(summary, problems) of one slice's signature: its first CodeDirectory's fields and its
    code pages against their hashes."""
    blob = raw[dataoff : dataoff + datasize]
    magic, _, count = struct.unpack_from(">III", blob, 0)
    if magic != CS_SUPERBLOB:
        return "", [f"signature: not a SuperBlob (magic {magic:#x})"]
    for i in range(count):
        _, off = struct.unpack_from(">II", blob, 12 + 8 * i)
        if struct.unpack_from(">I", blob, off)[0] != CS_CODEDIRECTORY:
            continue
        # CS_CodeDirectory (cs_blobs.h): magic, length, version, flags, hashOffset, identOffset,
        # nSpecialSlots, nCodeSlots, codeLimit, then hashSize, hashType, platform, pageSize.
        version, flags, hash_offset, _, _, n_code, code_limit = struct.unpack_from(">7I", blob, off + 8)
        hash_size, hash_type, _, page_log = struct.unpack_from(">BBBB", blob, off + 36)
        page = 1 << page_log
        names = ", ".join(n for f, n in FLAG_NAMES.items() if flags & f) or "none"
        linker = "yes" if flags & CS_LINKER_SIGNED else "no"
        summary = f"CodeDirectory version {version:#x}, flags {flags:#x} ({names}); linker-signed: {linker}"
        problems = []
        # lld writes codeLimit = the signature's own file offset (CodeSignatureSection::writeTo:
        # `codeLimit = fileOff`), as ld64 and codesign do: everything before the signature is
        # hashed. A shorter one leaves the bytes between unhashed, free to change.
        if code_limit != dataoff:
            short = f"codeLimit {code_limit:#x}, not LC_CODE_SIGNATURE's dataoff {dataoff:#x}"
            problems.append(f"signature: {short}")
        # macOS on arm64 needs the exec-segment fields (execSegBase/Limit/Flags), which a
        # CodeDirectory has from version CS_SUPPORTSEXECSEG on; lld writes exactly that version.
        if version < CS_SUPPORTSEXECSEG:
            problems.append(f"signature: CodeDirectory version {version:#x}, below CS_SUPPORTSEXECSEG")
        for f, want in EXPECT_FLAGS[expect].items():
            if bool(flags & f) != want:
                verb = "lack" if want else "have"
                problems.append(f"signature: flags {flags:#x} {verb} {FLAG_NAMES[f]} (--expect {expect})")
        if hash_type not in HASHES:
            return summary, problems + [f"signature: unknown hash type {hash_type}"]
        if n_code != (code_limit + page - 1) // page:
            problems.append(f"signature: {n_code} page hashes for a {code_limit}-byte codeLimit")
            return summary, problems
        bad = 0
        for p in range(n_code):
            want = blob[off + hash_offset + p * hash_size : off + hash_offset + (p + 1) * hash_size]
            got = HASHES[hash_type](raw[p * page : min((p + 1) * page, code_limit)]).digest()[:hash_size]
            bad += want != got
        if bad:
            problems.append(f"signature: {bad} of {n_code} page hashes do not match the file")
        return summary, problems
    return "", ["signature: no CodeDirectory"]


def check(path: str, min_macos: str, expect: str = "adhoc") -> list:
    name = path.replace("\\", "/")
    want = {"arm64", "x86_64"} if "universal2" in name else {"arm64"} if "aarch64" in name else {"x86_64"}
    data = open(path, "rb").read()
    problems, seen = [], set()
    for off, size, align in slices(data):
        raw = data[off : off + size]
        b = lief.MachO.parse(list(raw)).at(0)
        cpu = CPU.get(b.header.cpu_type, str(b.header.cpu_type))
        seen.add(cpu)
        where = f"{path} [{cpu}]"
        if align is not None and cpu in FAT_PAGE:
            # A slice must start on a page of its architecture (the kernel maps it from there):
            # 2^14 for arm64, 2^12 for x86_64, as llvm-lipo's calculateAlignment writes them. An
            # x86_64 slice may say 14 too: cargo-zigbuild's fat writer gives every slice the
            # largest alignment among them.
            need = FAT_PAGE[cpu]
            print(f"{where}: at offset {off:#x}, fat_arch align 2^{align}")
            if off % (1 << need):
                problems.append(f"{where}: slice offset {off:#x} is not a multiple of 2^{need}")
            if align != need and not (cpu == "x86_64" and align == FAT_PAGE["arm64"]):
                problems.append(f"{where}: fat_arch align is 2^{align}, not 2^{need}")
        # macOS's local network privacy identifies a program by its LC_UUID (TN3179: "make sure
        # that every Mach-O image has a UUID"); without one it cannot keep the owner's answer.
        if not b.has_uuid:
            problems.append(f"{where}: no LC_UUID (macOS local network privacy needs it, TN3179)")
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
        # arm64 must always be signed (the kernel kills it otherwise); a Developer ID build must
        # sign every slice (Gatekeeper and notarization check the x86_64 one too).
        if cpu == "arm64" or expect == "developer-id":
            if not b.has_code_signature:
                why = "macOS kills unsigned arm64 binaries" if cpu == "arm64" else "a Developer ID build signs every slice"
                problems.append(f"{where}: no LC_CODE_SIGNATURE ({why})")
            else:
                cs = b.code_signature
                summary, found = signature_problems(raw, cs.data_offset, cs.data_size, expect)
                if summary:
                    print(f"{where}: {summary}")
                problems += [f"{where}: {p}" for p in found]
                if not found:
                    print(f"{where}: {expect} signature, every page hash matches")
    if seen != want:
        problems.append(f"{path}: slices {sorted(seen)}, expected {sorted(want)}")
    return problems


def self_test(path: str, min_macos: str, expect: str = "adhoc") -> list:
    """The broken variant: the same file with one byte of code changed after signing must be
    caught by the signature check."""
    import os
    import tempfile

    data = bytearray(open(path, "rb").read())
    off = slices(bytes(data))[0][0]
    data[off + 0x4000 + 17] ^= 0xFF
    with tempfile.TemporaryDirectory() as d:
        broken = os.path.join(d, os.path.basename(os.path.dirname(os.path.dirname(path))) + "-relay")
        open(broken, "wb").write(data)
        caught = [p for p in check(broken, min_macos, expect) if "page hashes do not match" in p]
    return [] if caught else [f"{path}: a changed code page was not caught by the signature check"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-macos", required=True)
    ap.add_argument("--expect", choices=tuple(EXPECT_FLAGS), default="adhoc", help="the arm64 signer")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    arm = [f for f in args.files if "aarch64" in f]
    problems = [p for f in arm[:1] for p in self_test(f, args.min_macos, args.expect)]
    if arm and not problems:
        print(f"self-test: a changed code page of {arm[0]} is caught")
    problems += [p for f in args.files for p in check(f, args.min_macos, args.expect)]
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    print(f"check_macho: {len(args.files)} file(s), {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
