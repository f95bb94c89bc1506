"""Settings for the whole suite."""

import os

# Every job a test runs, in this process or in a child, starts a tracking process of its own
# (as a user's job does with PIPELINE_TRACKER_IDLE_S=0): a shared one would outlive the test
# that started it. tests/pipeline/test_shared_tracker.py tests the shared one.
os.environ["PIPELINE_TRACKER_IDLE_S"] = "0"
