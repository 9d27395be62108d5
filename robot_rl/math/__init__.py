"""Pure tensor math shared by agents and critics (TD targets, projections); no state, no modules."""
