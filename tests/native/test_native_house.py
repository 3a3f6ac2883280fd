"""What native code may depend on: nothing from the Python layer (no capsem_core.* but
capsem_core._native.*), no SQL of its own through the sqlite3 module, the codecs through their
own headers; every native source listed in CMakeLists.txt (no glob); x86 SIMD flags only for
x86-64 targets, the NEON level only for arm64 ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "src" / "capsem_core" / "_native"
SOURCES = sorted(p for p in NATIVE.rglob("*") if p.suffix in {".pyx", ".pxi", ".pxd", ".c", ".h"})


def test_the_native_tree_is_grouped_by_concept():
    names = {p.relative_to(NATIVE).as_posix() for p in SOURCES}
    for want in ("archive/_archive.pyx", "archive/archive_reader.c", "archive/archive_verify.c",
                 "index/_index.pyx", "index/index_scan.c", "blake3/_blake3.pyx", "blake3/blake3_dispatch.c",
                 "blake3/x86/blake3_avx2.c", "blake3/x86/blake3_avx512.c", "blake3/x86/blake3_sse41.c",
                 "blake3/x86/blake3_rows.h", "blake3/x86/blake3_x16.h", "blake3/arm/blake3_neon.c",
                 "common/_errors.pyx", "common/status.c", "common/status.h",
                 "common/map_guard.c", "pages/_pages.pyx", "pages/page_map.c", "warc/_warc.pyx",
                 "warc/warc_gzip.c", "warc/warc_gzip.h", "columns/_columns.pyx", "columns/arrow_abi.h",
                 "columns/scan_leaves.c", "columns/scan_pages.c", "columns/scan_rows.c", "columns/scan_stream.c",
                 "columns/columns_source.pxi"):
        assert want in names, want
    assert not (ROOT / "cext").exists()


def test_no_native_source_mentions_the_python_layer():
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in SOURCES
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 for m in re.finditer(r"capsem_core\.(\w+)", line) if m.group(1) != "_native"]
    assert offenders == [], offenders
    # The pattern finds what it is meant to.
    assert re.search(r"capsem_core\.(\w+)", "from capsem_core.format import x").group(1) == "format"


def test_no_native_source_runs_sql_through_the_sqlite3_module():
    pattern = re.compile(r"sqlite3\.connect|^\s*import\s+sqlite3|^\s*from\s+sqlite3\s+import", re.M)
    offenders = [p.relative_to(ROOT).as_posix() for p in SOURCES if pattern.search(p.read_text())]
    assert offenders == [], offenders
    assert pattern.search("import sqlite3\n") and pattern.search("c = sqlite3.connect(x)")


def test_cmake_lists_every_native_source_and_globs_none():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "file(GLOB" not in cmake.upper().replace(" ", "")
    for p in SOURCES:
        if p.suffix in {".c", ".pyx", ".pxi"}:
            assert p.name in cmake, f"{p.relative_to(ROOT)} is not listed in CMakeLists.txt"


def test_simd_flags_are_only_set_for_x86_64_targets():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    guard = cmake.index("if(CAPSEM_X86_SIMD)")
    end = cmake.index("endif()", guard)
    for flag in ("-msse4.1", "-mavx2", "-mavx512f"):
        spots = [m.start() for m in re.finditer(re.escape(flag), cmake)]
        assert spots and all(guard < at < end for at in spots), flag
    assert re.search(r'MATCHES "\^\(x86_64\|AMD64\|amd64\)\$"', cmake)
    assert "CMAKE_OSX_ARCHITECTURES" in cmake
    dispatch = (NATIVE / "blake3" / "blake3_dispatch.c").read_text()
    # cpuid / __builtin_cpu_* only under the CMake-defined guard.
    first_guard = dispatch.index("#if defined(CAPSEM_HAVE_X86_SIMD)")
    assert dispatch.index("__builtin_cpu_init") > dispatch.index("defined(CAPSEM_HAVE_X86_SIMD) &&")
    assert dispatch.index("&capsem_blake3_sse41_kernels") > first_guard


def test_the_neon_level_is_built_and_offered_only_for_arm64_targets():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r'elseif\(CAPSEM_TARGET_ARCH MATCHES "\^\(aarch64\|arm64\|ARM64\)\$"\)\n  set\(CAPSEM_NEON_SIMD ON\)', cmake)
    spot = cmake.index("arm/blake3_neon.c")
    guard = cmake.rindex("if(CAPSEM_NEON_SIMD)", 0, spot)
    assert cmake.index("endif()", guard) > spot
    dispatch = (NATIVE / "blake3" / "blake3_dispatch.c").read_text()
    neon_guard = dispatch.index("#if defined(CAPSEM_HAVE_NEON_SIMD)")
    assert neon_guard < dispatch.index("&capsem_blake3_neon_kernels") < dispatch.index("#endif", neon_guard)
    # The lanes shared by every level name no instruction set; each level brings its own.
    lanes = (NATIVE / "blake3" / "blake3_lanes.h").read_text()
    assert "immintrin" not in lanes and "arm_neon" not in lanes and "_mm_" not in lanes


def test_the_codecs_are_built_against_their_own_headers():
    reader = (NATIVE / "archive" / "archive_reader.c").read_text()
    inflate = (NATIVE / "archive" / "archive_inflate.c").read_text()
    assert "#include <zstd.h>" in reader and "#include <libdeflate.h>" in inflate
    # No native source declares a codec entry point of its own.
    declared = re.compile(r"^\s*(?:size_t|unsigned|ZSTD_DCtx\s*\*|enum libdeflate_result|struct libdeflate_decompressor\s*\*)"
                          r"\s*(?:ZSTD_|libdeflate_)\w+\s*\(", re.M)
    offenders = [p.relative_to(ROOT).as_posix() for p in SOURCES if declared.search(p.read_text())]
    assert offenders == [], offenders
    assert declared.search("size_t ZSTD_freeDCtx(ZSTD_DCtx *dctx);\n")
    cmake = (ROOT / "CMakeLists.txt").read_text()
    assert "find_path(ZSTD_INCLUDE_DIR zstd.h)" in cmake and "find_path(DEFLATE_INCLUDE_DIR libdeflate.h)" in cmake
    assert "libzstd.so.1" not in cmake and "libdeflate.so.0" not in cmake


def test_every_extension_module_has_a_stub_and_the_package_is_typed():
    for name in ("_archive", "_index", "_blake3", "_errors", "_pages", "_warc", "_columns"):
        assert (NATIVE / f"{name}.pyi").is_file(), name
    assert (NATIVE.parent / "py.typed").is_file()
