"""The experiment harnesses behind scripts/long_context.py, scripts/paper_table.py and scripts/recall.py, one job a
module: `processes` (children, their clean stop, the log), `worker` (the one instrumented trainer), `rows` (the
small models' rows and settings), `reports` (tables, orderings beyond the seeds' spread, figures), `approximation`
(EVA against softmax in a trained model), `evaluations` (the evaluation scripts' scores), and one module a harness
(`long_context`, `paper_table`, `recall`) that runs its steps; each script is its --help text and main."""
