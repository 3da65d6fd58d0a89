"""The bottom layer: errors, waiting, interrupts, options and the event/result models.

Everything above may import it; it imports nothing of dd_accept above itself, and nothing
heavy, because the programs on compute nodes (`dd_accept.node`) import it too.
"""
