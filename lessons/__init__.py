"""Each lesson's own code, one module (or folder) per lesson named by its number, as ``exercises/lesson_NN.py`` holds
its checkers: the engines and scripts a single lesson runs and prints. What two or more lessons use lives in
``helpers``."""
