"""infra — what the paper's files stand on but the paper does not describe: loading models (models), padding and
the speed-ups with their switch (padding, speedups), several processes and one optimizer step's mechanics
(distributed), clean stops (stops), atomic files and checkpoints (checkpoints), statistics (stats), the command
line built from the knobs (flags), figures (plots), and what a command may write (safety). It imports only world/."""
