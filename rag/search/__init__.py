"""Search: routing, channels, fusion, abstention and the pipeline that chains them."""
