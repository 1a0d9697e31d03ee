"""The experiment harnesses behind scripts/long_context.py, scripts/paper_table.py and scripts/recall.py, one job a
module: `processes` (children, their clean stop, the log), `worker` (the instrumented trainer), `rows` (the small
models' rows and settings), `reports` (tables, orderings, figures), `approximation` (EVA against softmax in a
trained model), and one module a harness (`long_context`, `paper_table`, `recall`) that runs its steps."""
