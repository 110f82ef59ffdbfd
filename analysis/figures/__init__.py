"""Figure builders, one module per thing drawn (each returns a matplotlib Figure):

    drift       D(r, A) surfaces and slices beside PPO-clip and DPO; a drift over training progress
    value_loss  a value loss and its gradient against the prediction error, beside L2
    shaping     a learned potential over observation slices; the observation box it is drawn over
    training    ES fitness and step size over generations
    style       the scoped seaborn theme, palettes, labels and heatmap helpers they share

`metadisco.analysis.plots` draws a whole run with them (`plot_run`); import a builder from its module here.
"""
