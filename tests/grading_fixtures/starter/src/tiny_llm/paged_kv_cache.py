import mlx.core as mx


class TinyKvPagedPool:
    def __init__(self, page_size: int = 128) -> None:
        self.page_size = page_size

    def allocate_page(self) -> int:
        raise NotImplementedError

    def free_page(self, page_id: int) -> None:
        raise NotImplementedError


class TinyKvPagedCache:
    def __init__(self, pool: TinyKvPagedPool) -> None:
        self.pool = pool

    def update_and_fetch_paged(self, key: mx.array, value: mx.array, mask_length: int | None = None, mask=None):
        raise NotImplementedError

    def block_table(self, max_pages: int | None = None) -> mx.array:
        raise NotImplementedError

    def context_lens(self) -> mx.array:
        raise NotImplementedError

    def release(self) -> None:
        pass
