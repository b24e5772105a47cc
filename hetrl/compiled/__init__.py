"""The compiled update: a learner's declared update as one graph, and when to use it."""
