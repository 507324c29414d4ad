//! s3s-fs with its objects read in large blocks.
//!
//! s3s-fs streams a GET's body in 4 kB reads of a `tokio::fs::File`, and each read is a trip
//! through tokio's blocking pool: 40,000 of them, and two task switches each, for 160 MB. On
//! bench/storage.py's corpus that cost the server 1.1 CPU-s a job, more than the job spends
//! decoding, and on a machine whose cores the server shares with the job it was charged to the
//! job. A store reads its disks in large blocks; this one does too. Everything else (the
//! request's checks, the range, the headers, the ETag) is s3s-fs's own answer: only the body
//! is read again, in 1 MiB blocks.

use std::path::{Component, Path, PathBuf};

use s3s::dto::{GetObjectInput, GetObjectOutput, StreamingBlob, Timestamp};
use s3s::{S3Request, S3Response, S3Result, S3};
use std::io::{Read, Seek};
use tokio::io::{AsyncReadExt, Take};

/// The size of each read of an object's body.
const READ_BLOCK: usize = 1 << 20;

pub(crate) struct Store {
    fs: s3s_fs::FileSystem,
    root: PathBuf,
}

impl Store {
    pub(crate) fn new(root: &Path) -> Store {
        Store {
            fs: s3s_fs::FileSystem::new(root).expect("s3s-fs opens its root"),
            root: root.to_path_buf(),
        }
    }

    async fn get_object_in_blocks(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let (bucket, key) = (req.input.bucket.clone(), req.input.key.clone());
        let mut answer = self.fs.get_object(req).await?;
        let output = &mut answer.output;
        let (Some(length), Some(path)) = (output.content_length, self.object_path(&bucket, &key))
        else {
            return Ok(answer);
        };
        let (start, total) = match &output.content_range {
            None => (0, u64::try_from(length).unwrap_or(0)),
            Some(range) => match first_byte_and_total(range) {
                Some(at) => at,
                // A range this does not read as s3s-fs wrote it: its own body stays.
                None => return Ok(answer),
            },
        };
        let (length, modified) = (
            u64::try_from(length).unwrap_or(0),
            output.last_modified.clone(),
        );
        let opened =
            tokio::task::spawn_blocking(move || open_body(&path, start, length, total, modified));
        output.body = match opened.await {
            // The whole body, handed over as it was read: no second copy.
            Ok(Some(Body::Read(bytes))) => Some(StreamingBlob::from(s3s::Body::from(bytes))),
            Ok(Some(Body::InBlocks(file))) => Some(StreamingBlob::wrap(
                tokio_util::io::ReaderStream::with_capacity(file, READ_BLOCK),
            )),
            // The file changed or is gone: s3s-fs's own body stays.
            _ => output.body.take(),
        };
        Ok(answer)
    }

    /// The file of `bucket`/`key`, where the key names one below the bucket's folder.
    fn object_path(&self, bucket: &str, key: &str) -> Option<PathBuf> {
        let plain = |p: &str| {
            !p.is_empty()
                && Path::new(p)
                    .components()
                    .all(|c| matches!(c, Component::Normal(_)))
        };
        (plain(bucket) && plain(key)).then(|| self.root.join(bucket).join(key))
    }
}

/// An object's body: read already, or to be read a block at a time as it is sent.
enum Body {
    Read(Vec<u8>),
    InBlocks(Take<tokio::fs::File>),
}

/// The `length` bytes at `start` of the file at `path`, where it is still the object s3s-fs
/// answered for (`total` bytes, last modified at `modified`): a store never serves one
/// version's headers with another's bytes. A body of one block is read at once (one trip
/// through the blocking pool, not four), a longer one a block at a time as it is sent.
fn open_body(
    path: &Path,
    start: u64,
    length: u64,
    total: u64,
    modified: Option<Timestamp>,
) -> Option<Body> {
    let mut file = std::fs::File::open(path).ok()?;
    if !same_version(&file.metadata().ok()?, total, modified.as_ref()) {
        return None;
    }
    file.seek(std::io::SeekFrom::Start(start)).ok()?;
    if length <= READ_BLOCK as u64 {
        let mut body = vec![0; length as usize];
        file.read_exact(&mut body).ok()?;
        return Some(Body::Read(body));
    }
    Some(Body::InBlocks(tokio::fs::File::from_std(file).take(length)))
}

/// Whether the file of `meta` is the object s3s-fs answered for: `total` bytes, last modified
/// at `last_modified`.
fn same_version(meta: &std::fs::Metadata, total: u64, last_modified: Option<&Timestamp>) -> bool {
    let modified = meta.modified().ok().map(Timestamp::from);
    meta.len() == total && modified.as_ref() == last_modified
}

/// The first byte and the object's length of a `Content-Range` of the form
/// `bytes FIRST-LAST/TOTAL`.
fn first_byte_and_total(range: &str) -> Option<(u64, u64)> {
    let (first, rest) = range.strip_prefix("bytes ")?.split_once('-')?;
    let (_, total) = rest.split_once('/')?;
    Some((first.parse().ok()?, total.parse().ok()?))
}

/// Every operation s3s-fs implements goes to it; GET's body is read in blocks.
macro_rules! store_operations {
    ($($name:ident: $input:ident => $output:ident),* $(,)?) => {
        #[async_trait::async_trait]
        impl S3 for Store {
            $(
                async fn $name(
                    &self,
                    req: S3Request<s3s::dto::$input>,
                ) -> S3Result<S3Response<s3s::dto::$output>> {
                    self.fs.$name(req).await
                }
            )*

            async fn get_object(
                &self,
                req: S3Request<GetObjectInput>,
            ) -> S3Result<S3Response<GetObjectOutput>> {
                self.get_object_in_blocks(req).await
            }
        }
    };
}

store_operations! {
    abort_multipart_upload: AbortMultipartUploadInput => AbortMultipartUploadOutput,
    complete_multipart_upload: CompleteMultipartUploadInput => CompleteMultipartUploadOutput,
    copy_object: CopyObjectInput => CopyObjectOutput,
    create_bucket: CreateBucketInput => CreateBucketOutput,
    create_multipart_upload: CreateMultipartUploadInput => CreateMultipartUploadOutput,
    delete_bucket: DeleteBucketInput => DeleteBucketOutput,
    delete_object: DeleteObjectInput => DeleteObjectOutput,
    delete_objects: DeleteObjectsInput => DeleteObjectsOutput,
    get_bucket_location: GetBucketLocationInput => GetBucketLocationOutput,
    head_bucket: HeadBucketInput => HeadBucketOutput,
    head_object: HeadObjectInput => HeadObjectOutput,
    list_buckets: ListBucketsInput => ListBucketsOutput,
    list_objects: ListObjectsInput => ListObjectsOutput,
    list_objects_v2: ListObjectsV2Input => ListObjectsV2Output,
    list_parts: ListPartsInput => ListPartsOutput,
    put_object: PutObjectInput => PutObjectOutput,
    upload_part: UploadPartInput => UploadPartOutput,
    upload_part_copy: UploadPartCopyInput => UploadPartCopyOutput,
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use s3s::dto::Range;

    #[test]
    fn a_content_range_gives_its_first_byte_and_the_objects_length() {
        assert_eq!(first_byte_and_total("bytes 0-99/100"), Some((0, 100)));
        assert_eq!(
            first_byte_and_total("bytes 4096-8191/115200044"),
            Some((4096, 115_200_044))
        );
        assert_eq!(first_byte_and_total("bytes */100"), None);
        assert_eq!(first_byte_and_total("bytes 0-99/*"), None);
        assert_eq!(first_byte_and_total("items 1-2/3"), None);
    }

    #[test]
    fn a_file_put_in_the_objects_place_is_not_its_version() {
        let path =
            std::env::temp_dir().join(format!("sonograph-s3-version-{}", std::process::id()));
        std::fs::write(&path, b"12345").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let time = Timestamp::from(meta.modified().unwrap());
        assert!(same_version(&meta, 5, Some(&time)));
        assert!(!same_version(&meta, 6, Some(&time)));
        let earlier = Timestamp::from(meta.modified().unwrap() - std::time::Duration::from_secs(1));
        assert!(!same_version(&meta, 5, Some(&earlier)));
        assert!(!same_version(&meta, 5, None));
        std::fs::remove_file(&path).unwrap();
    }

    fn get(key: &str, range: Option<Range>) -> S3Request<GetObjectInput> {
        let mut input = GetObjectInput::builder();
        input
            .set_bucket("b".into())
            .set_key(key.into())
            .set_range(range);
        S3Request {
            input: input.build().expect("a GetObject input"),
            method: http::Method::GET,
            uri: http::Uri::from_static("/"),
            headers: Default::default(),
            extensions: Default::default(),
            credentials: None,
            region: None,
            service: None,
            trailing_headers: None,
        }
    }

    /// The body's chunks, each as long as it came.
    async fn chunks(answer: S3Response<GetObjectOutput>) -> Vec<Vec<u8>> {
        let mut body = answer.output.body.expect("a body");
        let mut chunks = Vec::new();
        while let Some(chunk) = body.next().await {
            chunks.push(chunk.expect("the body reads").to_vec());
        }
        chunks
    }

    #[test]
    fn a_get_reads_the_objects_bytes_in_large_blocks_whole_and_in_ranges() {
        let root = std::env::temp_dir().join(format!("sonograph-s3-store-{}", std::process::id()));
        std::fs::create_dir_all(root.join("b")).unwrap();
        let object: Vec<u8> = (0..3 * READ_BLOCK as u32 + 5)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        std::fs::write(root.join("b").join("long.bin"), &object).unwrap();
        std::fs::write(root.join("b").join("small.bin"), &object[..100_000]).unwrap();
        let store = Store::new(&root);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let whole = chunks(store.get_object(get("long.bin", None)).await.unwrap()).await;
            // s3s-fs's own body comes in 4 kB chunks.
            assert_eq!(whole[0].len(), READ_BLOCK);
            assert_eq!(whole.concat(), object);

            let range = Range::Int {
                first: 1_000_000,
                last: Some(2_500_000),
            };
            let part = store
                .get_object(get("long.bin", Some(range)))
                .await
                .unwrap();
            assert_eq!(part.output.content_length, Some(1_500_001));
            assert_eq!(chunks(part).await.concat(), object[1_000_000..=2_500_000]);

            let tail = store
                .get_object(get("long.bin", Some(Range::Suffix { length: 10 })))
                .await
                .unwrap();
            assert_eq!(chunks(tail).await.concat(), object[object.len() - 10..]);

            // A body of one block comes in one chunk (s3s-fs's in 25).
            let small = chunks(store.get_object(get("small.bin", None)).await.unwrap()).await;
            assert_eq!(small.len(), 1);
            assert_eq!(small.concat(), object[..100_000]);

            assert!(store.get_object(get("missing.bin", None)).await.is_err());
        });
        std::fs::remove_dir_all(&root).unwrap();
    }
}
