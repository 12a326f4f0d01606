"""Differential fuzzing: random graphs of the whole operator set, run by graphflow's
executor and by plain-loop references, must agree bit for bit (values, dtypes,
shapes) or both reject the input (graphflow with an InvalidArgumentError)."""
