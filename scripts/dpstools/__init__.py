"""dpscale's Python tools: the package behind the entry points of scripts/.

results reads and checks a results folder (the schema of its files); stats
holds the statistics (median, quantile, the U test, the paired-shift test);
judge and report compare two results (compare.py), tracediff says where a
slower step lost its time; folder, charts, summary,
speedup, diagnose, predicted, culprit (where a step went: partition,
waiting vs moving, stragglers) and buckets_advice (the bucket size to use)
draw one (plot.py); gate is the regression
gate (regress.py); torch_model, torch_graph, torch_module, torch_timing,
torch_train and torch_results are the PyTorch reference (torch_reference.py);
interpreter runs a script again under /usr/bin/python3 when the Python
running it lacks numpy, PyTorch or matplotlib; grad_scaler
is GradScaler's loss scale as a pure function (the fp16 tests); validate
checks dpscale predict (predict_validate.py); figures holds the GPU check's
figure lines, sanitizer_log reads compute-sanitizer's log for it; netns
emulates hosts for the tests. Standard library only,
but for matplotlib (charts, report's chart), numpy (torch_*, grad_scaler) and
PyTorch (torch_*).
A script run as `python3 scripts/NAME.py` finds the package beside it;
anything else puts scripts/ on PYTHONPATH (the tests do, through meson).
"""
