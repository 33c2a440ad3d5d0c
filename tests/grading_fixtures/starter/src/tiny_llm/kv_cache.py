class BatchingKvCache:
    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:
        pass

    def add_request(self, prefilled, id: int) -> None:
        raise NotImplementedError

    def remove_request(self, id: int) -> None:
        raise NotImplementedError
