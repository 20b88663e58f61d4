"""Every exercise checker, by the name the lessons call it: a lesson imports ``from exercises import checks`` and calls
``checks.check_xxx(...)``. Each lesson's checkers live in ``exercises/lesson_NN.py``; ``CHECKERS`` lists them all by
exercise id, and ``exercises/core.py`` holds what they share."""

# ruff: noqa: F401 (every name imported here is there for the lessons to call)

from exercises.core import CHECKERS
from exercises.lesson_00 import check_zeros_on_device
from exercises.lesson_01 import check_add_noise, check_bandwidth, check_moved_copy
from exercises.lesson_02 import check_batch_on_device, check_error_reading, check_made_in_forward, check_train_step
from exercises.lesson_03 import check_buffers_move, check_load_on_cpu
from exercises.lesson_04 import check_device_loader, check_one_hot, check_padding_mask
from exercises.lesson_05 import check_best_change, check_count_correct, check_predict_proba, check_resident_batches
from exercises.lesson_06 import check_load_plain, check_replica_split, check_unprefixed_state_dict, check_unwrap
from exercises.lesson_07 import check_ddp_worker, check_global_mean, check_shard, check_steps_per_epoch
from exercises.lesson_08 import check_hidden_sync, check_time_call
from exercises.lesson_09 import check_amp_step, check_autocast_dtypes, check_channels_last
from exercises.lesson_10 import check_accumulation
from exercises.lesson_11 import check_flip_half, check_keep_rule, check_time_it, check_time_to_target
from exercises.lesson_12 import check_node_line, check_node_rank
from exercises.lesson_13 import check_resume, check_steps_redone
from exercises.lesson_14 import check_fully_shard, check_meta_build, check_rank_bytes
from exercises.lesson_15 import check_find_culprit, check_stop_handler
from exercises.lesson_16 import check_dcp_reshard, check_full_export
from exercises.lesson_17 import check_redistribute, check_tp_plan
