"""The inference engine every entry point runs on (Python API, command line, server, Ray,
Spark): tokenize once, one length-sorted batch loop (`batches`), the run precision (fp32 by
default; bf16, int8 and other runtimes as explicit choices), the thread policy, and the
verified caches of measured precision plans.
"""
