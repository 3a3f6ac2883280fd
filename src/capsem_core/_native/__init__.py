"""The native core: C and Cython, grouped by concept.

``_archive`` (session.bodies: headers, the block-cursor reader, the verify kernel),
``_index`` (body index scans through the SQLite C API), ``_blake3`` (BLAKE3 with SIMD
dispatch) and ``_errors`` (the exception hierarchy and the status table). Native code
imports nothing from the Python layer above it and runs no SQL but the index scans.
"""
