"""The pages' marked blocks, rendered from the records (benchmarks/results_tables.py is the command): one module a
section of the pages, each with its TABLES; records.py, the one reader of the records; core.py, the engine."""
