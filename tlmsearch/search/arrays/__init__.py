"""Trial arrays: due (candidate, seed) trainings packed K to a Ray trial (:mod:`.packing`) and the
trainable that trains them as one fused model (:mod:`.trainable`)."""
