"""Getting a model's weights into memory: which models there are (catalog) and where they come
from (fetch), their files' formats (formats/), their architectures and weights, and what is
kept between starts (user_cache, weight_cache)."""
