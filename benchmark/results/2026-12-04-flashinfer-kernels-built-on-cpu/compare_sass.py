"""Whether two builds of one FlashInfer module hold the same GPU machine code.

    python compare_sass.py A.so B.so

Takes each library's .nv_fatbin section (objcopy), splits it into its fatbin containers and their
zstd-compressed cubins (the layout nvcc 13.0 writes with -Xfatbin=-compress-all), and compares
the cubins' ELF sections: one line per cubin, then whether every kernel's .text.* section is the
same in both. Symbol and string tables differ between hosts: they name the build directory.
"""

import struct
import subprocess
import sys

import zstandard

FATBIN_MAGIC = 0xBA55ED50
SHT_NOBITS = 8


def fatbin(library: str) -> bytes:
    out = library + ".fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", library, out], check=True)
    with open(out, "rb") as f:
        return f.read()


def cubins(data: bytes) -> list[bytes]:
    found, offset = [], 0
    while offset < len(data):
        magic, _, header_size, body_size = struct.unpack_from("<IHHQ", data, offset)
        if magic != FATBIN_MAGIC:
            break
        element = offset + header_size
        while element < offset + header_size + body_size:
            _, _, element_header, size = struct.unpack_from("<HHIQ", data, element)
            payload = data[element + element_header:element + element_header + size]
            found.append(zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 26))
            element += element_header + size
        offset = (offset + header_size + body_size + 7) // 8 * 8
    return found


def sections(elf: bytes) -> dict[str, bytes]:
    (table,) = struct.unpack_from("<Q", elf, 0x28)
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, table + i * entry_size) for i in range(count)]
    names = headers[names_index][4]

    def name(offset: int) -> str:
        return elf[names + offset:elf.index(b"\0", names + offset)].decode()

    return {name(h[0]): b"" if h[1] == SHT_NOBITS else elf[h[4]:h[4] + h[5]] for h in headers}


def main(a: str, b: str) -> int:
    first, second = cubins(fatbin(a)), cubins(fatbin(b))
    print(f"{len(first)} and {len(second)} cubins")
    same_code = len(first) == len(second)
    for i, (x, y) in enumerate(zip(first, second)):
        sx, sy = sections(x), sections(y)
        differ = sorted(n for n in set(sx) | set(sy) if sx.get(n) != sy.get(n))
        same_code &= not any(n.startswith(".text.") for n in differ)
        print(i, len(x), len(y), "identical" if x == y else f"sections differing: {differ}")
    print("every kernel's machine code (.text.*) identical" if same_code else "machine code differs")
    return 0 if same_code else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
