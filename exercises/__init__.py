"""The course's exercise checkers, kept apart from ``helpers``: they grade a learner's code and are not taught.

Each lesson imports them with ``from exercises import checks``; ``checks.CHECKERS`` lists every one by exercise id.
"""
